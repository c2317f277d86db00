package syncbuf_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/quorumlock/quorumlock/internal/syncbuf"
)

// Writers and a reader at once (run with -race): every write lands whole.
func TestConcurrentWritesAndReads(t *testing.T) {
	var b syncbuf.Buffer
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 100 {
				fmt.Fprintf(&b, "w%d-%d\n", i, j)
				_ = b.String()
			}
		})
	}
	wg.Wait()
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 800 || len(b.Bytes()) != len(b.String()) {
		t.Fatalf("%d lines, want 800", len(lines))
	}
}
