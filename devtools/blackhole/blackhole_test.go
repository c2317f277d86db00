package blackhole_test

import (
	"net"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/devtools/blackhole"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A connection is accepted and never answered: a read waits for its
// deadline. Close ends the connections it holds.
func TestAcceptsAndNeverAnswers(t *testing.T) {
	s, err := blackhole.Listen()
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.DialTimeout("tcp", s.Addr(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	var b [1]byte
	if _, err := c.Read(b[:]); err == nil || !err.(net.Error).Timeout() {
		t.Fatalf("read: %v, want a timeout", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Read(b[:]); err == nil {
		t.Fatal("read after Close succeeded, want the connection closed")
	}
}
