package fencing_test

import (
	"errors"
	"sync"
	"testing"

	"github.com/quorumlock/quorumlock/fencing"
)

// setTo is the write half of a read-modify-write: it stores the value the
// holder computed from what it read.
func setTo(key string, fence, value int64, claimed bool) fencing.Update {
	return fencing.Update{Key: key, Fence: fence, Claimed: claimed,
		Set: []fencing.Assignment{fencing.Set("available", value)}}
}

func testClaim(t *testing.T, srv pgServer) {
	// The reason Claim exists: two holders read the same value with a plain
	// read, and both fenced writes pass in fence order. The update of the
	// older holder is lost although no stale fence was accepted.
	t.Run("PlainReadLosesAnUpdate", func(t *testing.T) {
		t.Parallel()
		pool, _ := newDB(t, srv)
		ctx := ctxT(t)
		tbl := stockTable(t)
		seed(t, pool, "42", 10, 0)
		a, b := readRow(t, pool, "42").available, readRow(t, pool, "42").available
		if err := tbl.Update(ctx, pool, setTo("42", 5, a-1, false)); err != nil {
			t.Fatal(err)
		}
		if err := tbl.Update(ctx, pool, setTo("42", 6, b-1, false)); err != nil {
			t.Fatal(err)
		}
		if r := readRow(t, pool, "42"); r.available != 9 {
			t.Fatalf("available %d: the interleaving did not lose an update", r.available)
		}
	})

	t.Run("ClaimedReadRejectsTheOlderWriter", func(t *testing.T) {
		t.Parallel()
		pool, _ := newDB(t, srv)
		ctx := ctxT(t)
		tbl := stockTable(t)
		seed(t, pool, "42", 10, 0)
		var a, b int64
		if err := tbl.Claim(ctx, pool, "42", 5, []string{"available"}, &a); err != nil {
			t.Fatal(err)
		}
		if err := tbl.Claim(ctx, pool, "42", 6, []string{"available"}, &b); err != nil {
			t.Fatal(err)
		}
		if a != 10 || b != 10 {
			t.Fatalf("claims read %d and %d, want 10", a, b)
		}
		err := tbl.Update(ctx, pool, setTo("42", 5, a-1, true))
		var rej *fencing.RejectedError
		if !errors.Is(err, fencing.ErrStaleFence) || !errors.As(err, &rej) || rej.Current != 6 {
			t.Fatalf("older holder's write: %v, want ErrStaleFence with current 6", err)
		}
		if err := tbl.Update(ctx, pool, setTo("42", 6, b-1, true)); err != nil {
			t.Fatal(err)
		}
		// The holder may write again under the same claim.
		if err := tbl.Update(ctx, pool, setTo("42", 6, b-2, true)); err != nil {
			t.Fatalf("second write under one claim: %v", err)
		}
		if r := readRow(t, pool, "42"); r.available != 8 || r.fence != 6 {
			t.Fatalf("row %+v, want available 8 fence 6", r)
		}
	})

	t.Run("Rejections", func(t *testing.T) {
		t.Parallel()
		pool, _ := newDB(t, srv)
		ctx := ctxT(t)
		tbl := stockTable(t)
		seed(t, pool, "42", 10, 7)
		var v int64
		for _, f := range []int64{7, 3} {
			if err := tbl.Claim(ctx, pool, "42", f, []string{"available"}, &v); !errors.Is(err, fencing.ErrStaleFence) {
				t.Fatalf("claim with fence %d on a row at 7: %v, want ErrStaleFence", f, err)
			}
		}
		if err := tbl.Claim(ctx, pool, "nope", 9, []string{"available"}, &v); !errors.Is(err, fencing.ErrNotFound) {
			t.Fatalf("claim of a missing row: %v, want ErrNotFound", err)
		}
		if err := tbl.Update(ctx, pool, setTo("42", 9, 1, true)); !errors.Is(err, fencing.ErrNotClaimed) {
			t.Fatalf("claimed write without a claim: %v, want ErrNotClaimed", err)
		}
		for name, err := range map[string]error{
			"zero fence":  tbl.Claim(ctx, pool, "42", 0, nil),
			"nil key":     tbl.Claim(ctx, pool, nil, 9, nil),
			"dest count":  tbl.Claim(ctx, pool, "42", 9, []string{"available"}),
			"bad column":  tbl.Claim(ctx, pool, "42", 9, []string{""}, &v),
			"nil querier": tbl.Claim(ctx, nil, "42", 9, nil),
		} {
			if !errors.Is(err, fencing.ErrInvalid) {
				t.Fatalf("%s: %v, want ErrInvalid", name, err)
			}
		}
		if r := readRow(t, pool, "42"); r.available != 10 || r.fence != 7 {
			t.Fatalf("rejected calls changed the row: %+v", r)
		}
	})

	// Holders with increasing fences race through claim, compute, write.
	// Whatever the interleaving, the row ends at the initial value minus
	// the writes it accepted: no update is lost.
	t.Run("ConcurrentReadModifyWriteLosesNothing", func(t *testing.T) {
		t.Parallel()
		pool, _ := newDB(t, srv)
		ctx := ctxT(t)
		tbl := stockTable(t)
		seed(t, pool, "42", 1000, 0)
		const holders = 40
		var mu sync.Mutex
		accepted, stale := 0, 0
		var wg sync.WaitGroup
		for f := int64(1); f <= holders; f++ {
			wg.Go(func() {
				var v int64
				err := tbl.Claim(ctx, pool, "42", f, []string{"available"}, &v)
				if err == nil {
					err = tbl.Update(ctx, pool, setTo("42", f, v-1, true))
				}
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					accepted++
				case errors.Is(err, fencing.ErrStaleFence):
					stale++
				default:
					t.Errorf("fence %d: %v", f, err)
				}
			})
		}
		wg.Wait()
		r := readRow(t, pool, "42")
		if got := 1000 - r.available; got != int64(accepted) {
			t.Fatalf("stock fell by %d but %d writes were accepted (%d stale)", got, accepted, stale)
		}
		if accepted == 0 || accepted+stale != holders {
			t.Fatalf("accepted %d, stale %d of %d holders", accepted, stale, holders)
		}
	})
}
