package quorum

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/lease"
)

func TestMajority(t *testing.T) {
	for n, want := range map[int]int{1: 1, 2: 2, 3: 2, 4: 3, 5: 3, 6: 4, 7: 4, 9: 5} {
		if got := majority(n); got != want {
			t.Errorf("majority(%d) = %d, want %d", n, got, want)
		}
	}
}

// Property: two majorities of the same n always share a node, and n-majority
// nodes can fail while a majority is still reachable, but not one more.
func TestMajorityProperties(t *testing.T) {
	for n := 1; n <= 101; n++ {
		q := majority(n)
		if 2*q <= n {
			t.Fatalf("n=%d: two majorities of %d can be disjoint", n, q)
		}
		if q > n {
			t.Fatalf("n=%d: majority %d larger than n", n, q)
		}
		if 2*(q-1) > n {
			t.Fatalf("n=%d: majority %d is not the smallest", n, q)
		}
	}
}

func TestValidity(t *testing.T) {
	cases := []struct {
		ttl, elapsed time.Duration
		drift        float64
		want         time.Duration
	}{
		{10 * time.Second, 0, 0.01, 10*time.Second - 100*time.Millisecond - 2*time.Millisecond},
		{10 * time.Second, 5 * time.Millisecond, 0.01, 10*time.Second - 5*time.Millisecond - 102*time.Millisecond},
		{100 * time.Millisecond, 0, 0, 98 * time.Millisecond},
		{100 * time.Millisecond, 98 * time.Millisecond, 0, 0},
		{100 * time.Millisecond, 200 * time.Millisecond, 0.01, -103 * time.Millisecond},
	}
	for _, c := range cases {
		if got := validity(c.ttl, c.elapsed, c.drift); got != c.want {
			t.Errorf("validity(%v, %v, %v) = %v, want %v", c.ttl, c.elapsed, c.drift, got, c.want)
		}
	}
}

// checkValidity holds the properties of validity for one input.
func checkValidity(t *testing.T, ttl, elapsed, more time.Duration, drift float64) {
	t.Helper()
	v := validity(ttl, elapsed, drift)
	if v >= ttl-elapsed {
		t.Fatalf("validity(%v, %v, %v) = %v, not below ttl-elapsed", ttl, elapsed, drift, v)
	}
	if v > ttl-elapsed-2*time.Millisecond {
		t.Fatalf("validity(%v, %v, %v) = %v, the 2ms margin is missing", ttl, elapsed, drift, v)
	}
	if w := validity(ttl, elapsed+more, drift); w > v || v-w != more {
		t.Fatalf("validity must fall one for one with elapsed: %v after %v more, was %v", w, more, v)
	}
	if elapsed >= ttl && v > 0 {
		t.Fatalf("validity(%v, %v, %v) = %v is positive although the TTL has passed", ttl, elapsed, drift, v)
	}
	if d2 := drift + 0.1; d2 < 0.5 {
		if w := validity(ttl, elapsed, d2); w > v {
			t.Fatalf("more drift must not give more validity: %v > %v", w, v)
		}
	}
}

func TestValidityProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 10000 {
		ttl := time.Duration(r.Int64N(int64(24 * time.Hour)))
		elapsed := time.Duration(r.Int64N(int64(ttl) + int64(time.Second)))
		more := time.Duration(r.Int64N(int64(time.Hour)))
		checkValidity(t, ttl, elapsed, more, r.Float64()*0.5)
	}
}

func FuzzValidity(f *testing.F) {
	f.Add(int64(10*time.Second), int64(3*time.Millisecond), int64(time.Millisecond), 0.01)
	f.Add(int64(10*time.Millisecond), int64(10*time.Millisecond), int64(0), 0.0)
	f.Add(int64(time.Hour), int64(0), int64(time.Hour), 0.49)
	f.Fuzz(func(t *testing.T, ttl, elapsed, more int64, drift float64) {
		const limit = int64(1000 * time.Hour)
		if ttl <= 0 || ttl > limit || elapsed < 0 || elapsed > limit || more < 0 || more > limit || !(drift >= 0 && drift < 0.5) {
			t.Skip()
		}
		checkValidity(t, time.Duration(ttl), time.Duration(elapsed), time.Duration(more), drift)
	})
}

func TestTallyVerdict(t *testing.T) {
	cases := []struct {
		n, ok, held, failed int
		want                verdict
		cause               error
	}{
		{5, 3, 0, 0, won, nil},
		{5, 2, 0, 0, undecided, nil},
		{5, 2, 2, 0, undecided, nil},
		{5, 2, 2, 1, beaten, lease.ErrQuorumUnavailable},
		{5, 0, 3, 0, beaten, lease.ErrNotAcquired},
		{5, 1, 1, 1, undecided, nil},
		{5, 1, 1, 2, beaten, lease.ErrQuorumUnavailable},
		{5, 0, 0, 3, beaten, lease.ErrQuorumUnavailable},
		{5, 2, 3, 0, beaten, lease.ErrNotAcquired},
		{1, 1, 0, 0, won, nil},
		{1, 0, 1, 0, beaten, lease.ErrNotAcquired},
		{4, 2, 1, 0, undecided, nil},
		{4, 2, 2, 0, beaten, lease.ErrNotAcquired},
		{4, 1, 2, 1, beaten, lease.ErrQuorumUnavailable},
		{4, 3, 1, 0, won, nil},
	}
	for _, c := range cases {
		tl := tally{n: c.n, quorum: majority(c.n), ok: c.ok, held: c.held, failed: c.failed}
		if got := tl.verdict(); got != c.want {
			t.Errorf("%+v: verdict %v, want %v", tl, got, c.want)
		}
		if c.cause != nil && !errors.Is(tl.cause(), c.cause) {
			t.Errorf("%+v: cause %v, want %v", tl, tl.cause(), c.cause)
		}
	}
}

// checkTally feeds answers one by one and checks the verdict is never
// premature: it is won only when a majority confirmed, beaten only when the
// remaining nodes cannot make a majority, and decided once everyone answered.
func checkTally(t *testing.T, answers []uint8) {
	t.Helper()
	n := len(answers)
	tl := newTally(n)
	decided := undecided
	for i, a := range answers {
		switch a % 3 {
		case 0:
			tl.ok++
		case 1:
			tl.held++
		default:
			tl.failed++
		}
		v := tl.verdict()
		if decided != undecided && v != decided {
			t.Fatalf("verdict changed from %v to %v after answer %d of %v", decided, v, i, answers)
		}
		decided = v
		remaining := n - tl.answered()
		switch v {
		case won:
			if tl.ok < majority(n) {
				t.Fatalf("won with %d of %d", tl.ok, n)
			}
		case beaten:
			if tl.ok+remaining >= majority(n) {
				t.Fatalf("beaten although %d confirmed and %d still pending could make %d", tl.ok, remaining, majority(n))
			}
			if errors.Is(tl.cause(), lease.ErrNotAcquired) && tl.held < majority(n) && tl.failed > 0 {
				t.Fatalf("lease.ErrNotAcquired with only %d held and %d failed", tl.held, tl.failed)
			}
			if errors.Is(tl.cause(), lease.ErrQuorumUnavailable) && tl.failed == 0 {
				t.Fatalf("lease.ErrQuorumUnavailable although no node failed: %+v", tl)
			}
		case undecided:
			if tl.ok >= majority(n) || tl.ok+remaining < majority(n) {
				t.Fatalf("undecided although the outcome is known: %+v", tl)
			}
		}
	}
	if decided == undecided {
		t.Fatalf("no verdict after every node answered: %+v", tl)
	}
}

func TestTallyProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 20000 {
		answers := make([]uint8, 1+r.IntN(15))
		for i := range answers {
			answers[i] = uint8(r.IntN(3))
		}
		checkTally(t, answers)
	}
}

func FuzzTally(f *testing.F) {
	f.Add([]byte{0, 0, 0, 1, 1})
	f.Add([]byte{1, 1, 1, 0, 0})
	f.Add([]byte{2, 2, 0, 0, 1})
	f.Add([]byte{0})
	f.Fuzz(func(t *testing.T, answers []byte) {
		if len(answers) == 0 || len(answers) > 64 {
			t.Skip()
		}
		checkTally(t, answers)
	})
}

func TestBackoffCap(t *testing.T) {
	base, max := 10*time.Millisecond, 500*time.Millisecond
	want := []time.Duration{10, 20, 40, 80, 160, 320, 500, 500, 500}
	for i, w := range want {
		if got := backoffCap(i, base, max); got != w*time.Millisecond {
			t.Errorf("backoffCap(%d) = %v, want %v", i, got, w*time.Millisecond)
		}
	}
	if got := backoffCap(1000, base, max); got != max {
		t.Errorf("backoffCap(1000) = %v, want %v", got, max)
	}
	if got := backoffCap(0, time.Second, max); got != max {
		t.Errorf("base above max: got %v, want %v", got, max)
	}
}

// checkBackoff holds the properties of the schedule: caps never exceed max,
// never shrink from one retry to the next, and every delay lies in [0, cap).
func checkBackoff(t *testing.T, base, max time.Duration, retries int, seed uint64) {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	prev := time.Duration(0)
	for i := range retries {
		c := backoffCap(i, base, max)
		if c <= 0 || c > max {
			t.Fatalf("cap(%d) = %v outside (0, %v] (base %v)", i, c, max, base)
		}
		if c < prev {
			t.Fatalf("cap(%d) = %v below cap(%d) = %v", i, c, i-1, prev)
		}
		prev = c
		d := backoffDelay(i, base, max, r.Int64N)
		if d < 0 || d >= c {
			t.Fatalf("delay(%d) = %v outside [0, %v)", i, d, c)
		}
	}
}

func TestBackoffProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for range 2000 {
		base := time.Duration(1 + r.Int64N(int64(time.Second)))
		max := base + time.Duration(r.Int64N(int64(time.Minute)))
		checkBackoff(t, base, max, 80, r.Uint64())
	}
}

// The delays are jittered: they are not all equal, and they spread over the
// whole range below the cap.
func TestBackoffJitter(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	const retry, samples = 4, 2000
	base, max := 10*time.Millisecond, time.Second
	c := backoffCap(retry, base, max)
	var low, high int
	for range samples {
		d := backoffDelay(retry, base, max, r.Int64N)
		if d < c/4 {
			low++
		}
		if d >= 3*c/4 {
			high++
		}
	}
	if low < samples/8 || high < samples/8 {
		t.Fatalf("delays are not spread over [0, %v): %d in the lowest quarter, %d in the highest", c, low, high)
	}
}

func FuzzBackoff(f *testing.F) {
	f.Add(int64(10*time.Millisecond), int64(500*time.Millisecond), uint8(70), uint64(1))
	f.Add(int64(1), int64(1), uint8(3), uint64(2))
	f.Add(int64(time.Hour), int64(time.Hour*1000), uint8(255), uint64(3))
	f.Fuzz(func(t *testing.T, base, max int64, retries uint8, seed uint64) {
		if base <= 0 || max < base {
			t.Skip()
		}
		checkBackoff(t, time.Duration(base), time.Duration(max), int(retries), seed)
	})
}
