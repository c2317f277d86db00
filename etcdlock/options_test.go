package etcdlock_test

import (
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/quorumlock/quorumlock/etcdlock"
)

// A bad configuration is refused with a clear error, before any call.
func TestBadConfigIsRefused(t *testing.T) {
	cli := &clientv3.Client{} // never called: New fails first
	for name, c := range map[string]struct {
		opts []etcdlock.Option
		want string
	}{
		"nil option":     {[]etcdlock.Option{nil}, "option 0 is nil"},
		"short TTL":      {[]etcdlock.Option{etcdlock.WithTTL(time.Second)}, "2s minimum"},
		"drift":          {[]etcdlock.Option{etcdlock.WithDriftFactor(0.7)}, "drift factor"},
		"negative wait":  {[]etcdlock.Option{etcdlock.WithMaxWait(-time.Second)}, "negative"},
		"empty prefix":   {[]etcdlock.Option{etcdlock.WithPrefix("")}, "empty prefix"},
		"margin":         {[]etcdlock.Option{etcdlock.WithSafetyMargin(6 * time.Second)}, "safety margin"},
		"nil fencer":     {[]etcdlock.Option{etcdlock.WithFencer(nil)}, "nil Fencer"},
		"nil observer":   {[]etcdlock.Option{etcdlock.WithObserver(nil)}, "nil Observer"},
		"negative nodeT": {[]etcdlock.Option{etcdlock.WithNodeTimeout(-1)}, "negative"},
	} {
		if _, err := etcdlock.New(cli, c.opts...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", name, err, c.want)
		}
	}
	if _, err := etcdlock.New(nil); err == nil {
		t.Error("a nil client was accepted")
	}
	l, err := etcdlock.New(cli, etcdlock.WithTTL(2500*time.Millisecond))
	if err != nil || l.TTL() != 3*time.Second {
		t.Fatalf("TTL 2.5s: %v, %v; want it rounded up to 3s", l.TTL(), err)
	}
	_ = l.Close()
}
