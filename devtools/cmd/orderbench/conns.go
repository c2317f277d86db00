package main

import (
	"context"
	"time"
)

// Sampling of the database connections in use.
const (
	// sampleEvery is the period of the samples.
	sampleEvery = 20 * time.Millisecond
	// sampleTimeout bounds one sample's query.
	sampleTimeout = time.Second
)

// connsInUseSQL counts the connections to the run's database that are not
// idle (active, or idle in a transaction), the sampler's own left out.
const connsInUseSQL = `SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND state <> 'idle' AND pid <> pg_backend_pid()`

// sampleConns samples the database connections in use every sampleEvery
// from the admin pool while w is open: from its start until its end. The
// returned stop ends the sampling, at the latest, and returns the peak, or
// -1 when no sample was taken.
func (b *bench) sampleConns(ctx context.Context, w *liveWindow) (stop func() int) {
	ctx, cancel := context.WithCancel(ctx)
	peak := -1
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(sampleEvery)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-tick.C:
				started, ended := w.state(now)
				if ended {
					return
				}
				if !started {
					continue
				}
			}
			if n, ok := b.connsInUse(ctx); ok {
				peak = max(peak, n)
			}
		}
	}()
	return func() int {
		cancel()
		<-done
		return peak
	}
}

// connsInUse takes one sample; false when the query failed.
func (b *bench) connsInUse(ctx context.Context) (int, bool) {
	ctx, cancel := context.WithTimeout(ctx, sampleTimeout)
	defer cancel()
	var n int
	if err := b.db.admin.QueryRow(ctx, connsInUseSQL).Scan(&n); err != nil {
		return 0, false
	}
	return n, true
}
