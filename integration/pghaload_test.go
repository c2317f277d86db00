package integration_test

// The load of the failover runs: buyers of one product, buyers of carts
// and triple-clickers on three ordersd, each paying half of its orders,
// and what their clients saw.

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/devtools/audit"
)

// haTally counts what the load's clients saw.
type haTally struct {
	created, conflicts, unavailable, noRetryAfter, timeouts, other int
	// paid, payFailed and payOpen count the payments: charged, declined,
	// and given up on (still PAYING or unanswered after the client's
	// tries; the reconciler settles them).
	paid, payFailed, payOpen int
}

func (h haTally) String() string {
	return fmt.Sprintf("%d created, %d 409, %d 503 (%d without Retry-After), %d timeouts, %d other; payments: %d paid, %d declined, %d left open",
		h.created, h.conflicts, h.unavailable, h.noRetryAfter, h.timeouts, h.other, h.paid, h.payFailed, h.payOpen)
}

// haLoad is the load of a failover run: buyers, each ordering one product
// per key, or a cart of two or three products, and retrying the key until
// a final answer, and triple-clickers, each sending its key three times at
// once to three instances. Every other order a buyer placed it pays.
type haLoad struct {
	d    *drill
	ds   []*daemon
	quit chan struct{}
	wg   sync.WaitGroup

	mu        sync.Mutex
	responses []audit.Response
	at        []haCreated // every 201 that placed an order
	tally     haTally
	hung      []string // the attempts that got no answer
	odd       []string // the answers of an unexpected status
	changed   chan struct{}
}

// haCreated is one 201 that placed an order (not a replay): when its
// attempt was sent and when it came back.
type haCreated struct{ sent, answered time.Time }

// haMix is how many clients of each kind a failover run has. A newcomer
// sends each order once, with a new key, and moves on whatever the answer
// (a customer arriving while the others retry keys whose outcome is in
// doubt): its 201s show when new orders go through again.
type haMix struct{ buyers, carts, clickers, newcomers int }

// startHALoad starts the clients of mix; seed picks their products and
// the keys' prefix, so that the loads of two seeds on one group never
// share a key.
func startHALoad(d *drill, ds []*daemon, mix haMix, seed uint64) *haLoad {
	l := &haLoad{d: d, ds: ds, quit: make(chan struct{}), changed: make(chan struct{})}
	for i := range mix.buyers + mix.carts + mix.clickers + mix.newcomers {
		kind := haBuyer
		switch {
		case i >= mix.buyers+mix.carts+mix.clickers:
			kind = haNewcomer
		case i >= mix.buyers+mix.carts:
			kind = haClicker
		case i >= mix.buyers:
			kind = haCarts
		}
		l.wg.Add(1)
		go l.client(fmt.Sprintf("ha-%d-user-%d", seed, i), kind, rand.New(rand.NewPCG(seed, uint64(i))))
	}
	return l
}

// The kinds of client of a failover run.
const (
	haBuyer = iota
	haCarts
	haClicker
	haNewcomer
)

// client orders until the load stops (at most 100000 keys).
func (l *haLoad) client(user string, kind int, rng *rand.Rand) {
	defer l.wg.Done()
	for n := 0; n < 100_000; n++ {
		select {
		case <-l.quit:
			return
		default:
		}
		key := fmt.Sprintf("%s-k%d", user, n)
		body := buy(haProducts[rng.IntN(len(haProducts))], 1)
		if kind == haCarts {
			body = haCart(rng)
		}
		if kind == haNewcomer {
			l.once(user, key, body, n)
			continue
		}
		if kind != haClicker {
			if id := l.untilFinal(user, key, body, n); id != "" && n%2 == 0 {
				l.pay(user, id, n)
			}
			continue
		}
		var wg sync.WaitGroup
		for i := range 3 {
			wg.Go(func() { l.untilFinal(user, key, body, n+i) })
		}
		wg.Wait()
	}
}

// haCart is the body of a cart of two or three of haProducts, one unit
// each but for the first, which takes two.
func haCart(rng *rand.Rand) string {
	ps := slices.Clone(haProducts)
	rng.Shuffle(len(ps), func(i, j int) { ps[i], ps[j] = ps[j], ps[i] })
	items := make([]map[string]any, 2+rng.IntN(2))
	for i := range items {
		items[i] = map[string]any{"productId": ps[i], "quantity": 1}
	}
	items[0]["quantity"] = 2
	b, _ := json.Marshal(map[string]any{"items": items, "addressVersion": "v1"})
	return string(b)
}

// untilFinal sends key until a final answer (at most 200 tries, waiting
// Retry-After's worth, 200ms, between them), records it, and returns the
// order's id when it is a 201.
func (l *haLoad) untilFinal(user, key, body string, turn int) string {
	for try := 0; try < 200; try++ {
		sent := time.Now()
		p := l.ds[(turn+try)%len(l.ds)]
		r, err := l.d.create(p, user, key, body)
		if err != nil {
			l.noAnswer(user, key, p, sent, err)
		}
		if l.record(user, key, r, err, sent) {
			return r.field("orderId")
		}
		time.Sleep(200 * time.Millisecond)
	}
	return ""
}

// once sends key once and records the answer, waiting 200ms after one
// that was not final.
func (l *haLoad) once(user, key, body string, turn int) {
	sent := time.Now()
	p := l.ds[turn%len(l.ds)]
	r, err := l.d.create(p, user, key, body)
	if err != nil {
		l.noAnswer(user, key, p, sent, err)
	}
	if !l.record(user, key, r, err, sent) {
		time.Sleep(200 * time.Millisecond)
	}
}

// noAnswer notes an attempt that got no answer.
func (l *haLoad) noAnswer(user, what string, p *daemon, sent time.Time, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.hung = append(l.hung, fmt.Sprintf("%s %s to %s at %s: %v", user, what, p.name, sent.Format("15:04:05.000"), err))
}

// pay pays order id until the payment is settled (at most 100 tries,
// 200ms apart), as a client would: 200 is final (PAID or
// PAYMENT_FAILED), 202 and 503 are tried again.
func (l *haLoad) pay(user, id string, turn int) {
	for try := 0; try < 100; try++ {
		sent := time.Now()
		p := l.ds[(turn+try)%len(l.ds)]
		r, err := l.d.do(http.MethodPost, p.base+"/orders/"+id+"/pay", user, "", "")
		if err != nil {
			l.noAnswer(user, "pay "+id, p, sent, err)
		}
		if l.recordPay(r, err) {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	l.mu.Lock()
	l.tally.payOpen++
	l.mu.Unlock()
}

// notFinal counts an attempt that got no answer, a 503 (noting one
// without a Retry-After) or a 202; under mu.
func (l *haLoad) notFinal(r reply, err error) {
	if err != nil {
		l.tally.timeouts++
		return
	}
	l.tally.unavailable++
	if r.Status == http.StatusServiceUnavailable && r.Header.Get("Retry-After") == "" {
		l.tally.noRetryAfter++
	}
}

// recordPay counts one answer to a pay and reports whether it was final.
func (l *haLoad) recordPay(r reply, err error) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case err != nil || r.Status == http.StatusServiceUnavailable || r.Status == http.StatusAccepted:
		l.notFinal(r, err)
		return false
	case r.Status == http.StatusOK && r.field("status") == "PAID":
		l.tally.paid++
	case r.Status == http.StatusOK:
		l.tally.payFailed++
	default:
		l.tally.other++
		l.odd = append(l.odd, fmt.Sprintf("pay: %s", r))
	}
	return true
}

// record counts one answer and reports whether it was final.
func (l *haLoad) record(user, key string, r reply, err error, sent time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case err != nil || r.Status == http.StatusServiceUnavailable || r.Status == http.StatusAccepted:
		l.notFinal(r, err)
		return false
	case r.Status == http.StatusCreated:
		l.tally.created++
		if !r.replayed() { // a replay comes from Redis, not from a primary
			l.at = append(l.at, haCreated{sent: sent, answered: time.Now()})
		}
		close(l.changed)
		l.changed = make(chan struct{})
	case r.Status == http.StatusConflict:
		l.tally.conflicts++
	default:
		l.tally.other++
		l.odd = append(l.odd, fmt.Sprintf("%s %s: %s", user, key, r))
	}
	l.responses = append(l.responses, haResponse(user, key, r))
	return true
}

// created is the number of 201s so far.
func (l *haLoad) created() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.tally.created
}

// unavailable is the number of 503s (and 202s) so far.
func (l *haLoad) unavailable() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.tally.unavailable
}

// waitCreated waits up to d for n 201s.
func (l *haLoad) waitCreated(t *testing.T, n int, d time.Duration) {
	t.Helper()
	if _, ok := l.waitFor(d, func() bool { return l.tally.created >= n }); !ok {
		t.Fatalf("%d 201s within %v, want %d", l.created(), d, n)
	}
}

// firstCreatedAfter waits up to d for a 201 of an attempt sent after at,
// and returns when it was answered.
func (l *haLoad) firstCreatedAfter(at time.Time, d time.Duration) (time.Time, bool) {
	return l.waitFor(d, func() bool {
		return slices.ContainsFunc(l.at, func(c haCreated) bool { return c.sent.After(at) })
	}, func() time.Time {
		var first time.Time
		for _, c := range l.at {
			if c.sent.After(at) && (first.IsZero() || c.answered.Before(first)) {
				first = c.answered
			}
		}
		return first
	})
}

// longestGap is the longest stretch between from and to with no order
// placed: from from to the first, and between two in a row.
func (l *haLoad) longestGap(from, to time.Time) time.Duration {
	l.mu.Lock()
	var at []time.Time
	for _, c := range l.at {
		if c.answered.After(from) && c.answered.Before(to) {
			at = append(at, c.answered)
		}
	}
	l.mu.Unlock()
	slices.SortFunc(at, time.Time.Compare)
	longest, last := time.Duration(0), from
	for _, a := range at {
		longest, last = max(longest, a.Sub(last)), a
	}
	return longest
}

// waitFor waits up to d until cond (under mu) holds, and returns what
// when (under mu) gives, if given.
func (l *haLoad) waitFor(d time.Duration, cond func() bool, when ...func() time.Time) (time.Time, bool) {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		l.mu.Lock()
		ok, ch := cond(), l.changed
		var at time.Time
		if ok && len(when) > 0 {
			at = when[0]()
		}
		l.mu.Unlock()
		if ok {
			return at, true
		}
		select {
		case <-ch:
		case <-deadline.C:
			return time.Time{}, false
		}
	}
}

// stop ends the load (each client finishes its key) and returns every
// final answer and the tally.
func (l *haLoad) stop(t *testing.T, d *drill) ([]audit.Response, haTally) {
	t.Helper()
	close(l.quit)
	done := make(chan struct{})
	go func() { l.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("the load's clients did not stop within 2m")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.responses, l.tally
}

// haResponse is the checker's record of an answer, with the lines a 201
// names, so that the checker can compare them with the order's row.
func haResponse(user, key string, r reply) audit.Response {
	resp := response(user, key, r)
	if r.Status != http.StatusCreated {
		return resp
	}
	var v struct {
		ProductID string `json:"productId"`
		Quantity  int64  `json:"quantity"`
		Items     []struct {
			ProductID string `json:"productId"`
			Quantity  int64  `json:"quantity"`
		} `json:"items"`
	}
	if json.Unmarshal([]byte(r.Body), &v) != nil {
		return resp
	}
	if v.ProductID != "" {
		resp.Lines = []audit.Line{{ProductID: v.ProductID, Quantity: v.Quantity}}
	}
	for _, it := range v.Items {
		resp.Lines = append(resp.Lines, audit.Line{ProductID: it.ProductID, Quantity: it.Quantity})
	}
	return resp
}
