package wait_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/wait"
)

// A live context: Sleep returns nil, after d and not before.
func TestSleepWaitsOutTheDelay(t *testing.T) {
	const d = 20 * time.Millisecond
	start := time.Now()
	if err := wait.Sleep(context.Background(), d); err != nil {
		t.Fatalf("Sleep: %v", err)
	}
	if got := time.Since(start); got < d {
		t.Fatalf("Sleep returned after %v, want at least %v", got, d)
	}
}

// A context that ends first cuts the sleep short with its error.
func TestSleepEndsWithTheContext(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := wait.Sleep(ctx, time.Hour)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Sleep: %v, want the context's deadline", err)
	}
	if got := time.Since(start); got > 10*time.Second {
		t.Fatalf("Sleep returned after %v, long after its context ended", got)
	}

	cctx, ccancel := context.WithCancel(context.Background())
	ccancel()
	if err := wait.Sleep(cctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sleep on a cancelled context: %v, want context.Canceled", err)
	}
}

// d <= 0 does not wait: the context's error at once, nil while it is live.
func TestSleepNonPositive(t *testing.T) {
	for _, d := range []time.Duration{0, -time.Second} {
		if err := wait.Sleep(context.Background(), d); err != nil {
			t.Fatalf("Sleep(%v) on a live context: %v", d, err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := wait.Sleep(ctx, d); !errors.Is(err, context.Canceled) {
			t.Fatalf("Sleep(%v) on a cancelled context: %v", d, err)
		}
	}
}
