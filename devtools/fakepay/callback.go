package fakepay

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/quorumlock/quorumlock/orders/payment"
)

// delivery is one callback to make, left times.
type delivery struct {
	key     string
	eventID string
	body    []byte
	left    int       // deliveries still to make (duplicates included)
	tries   int       // failed attempts of the current delivery
	due     time.Time // when the next attempt may start
}

// callbackQueue holds the deliveries waiting for the worker.
type callbackQueue struct {
	mu    sync.Mutex
	items []*delivery // at most CallbackQueueSize
	busy  int         // deliveries taken by the worker, not finished yet
	stats CallbackStats
	wake  chan struct{} // capacity 1: something was queued
}

func (q *callbackQueue) snapshot() CallbackStats {
	q.mu.Lock()
	defer q.mu.Unlock()
	st := q.stats
	st.Queued = len(q.items) + q.busy
	return st
}

// push queues d, or counts it dropped when the queue is full.
func (q *callbackQueue) push(d *delivery) bool {
	q.mu.Lock()
	if len(q.items) >= CallbackQueueSize {
		q.stats.Dropped++
		q.mu.Unlock()
		return false
	}
	q.items = append(q.items, d)
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
	return true
}

// next takes the earliest delivery that is due at now. When none is due
// it returns how long until the earliest one is, or ok false when the
// queue is empty.
func (q *callbackQueue) next(now time.Time) (d *delivery, wait time.Duration, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.items) == 0 {
		return nil, 0, false
	}
	i := 0
	for j, it := range q.items {
		if it.due.Before(q.items[i].due) {
			i = j
		}
	}
	if w := q.items[i].due.Sub(now); w > 0 {
		return nil, w, true
	}
	d = q.items[i]
	q.items = slices.Delete(q.items, i, i+1)
	q.busy++
	return d, 0, true
}

// enqueueCallback queues the callback of r's final status. Callers hold
// s.mu.
func (s *Server) enqueueCallback(r *record) {
	if s.cbURL == "" || r.callbackDone || (r.Status != payment.StatusSucceeded && r.Status != payment.StatusFailed) {
		return
	}
	ev := CallbackEvent{
		EventID:          eventID(r.PaymentRequestID, r.Status),
		PaymentRequestID: r.PaymentRequestID,
		Status:           r.Status,
		ProviderRef:      r.ProviderRef,
	}
	body, err := json.Marshal(ev)
	if err != nil { // only strings: cannot happen
		s.log.Error("fakepay: encode callback", "key", r.PaymentRequestID, "err", err)
		return
	}
	d := &delivery{key: r.PaymentRequestID, eventID: ev.EventID, body: body, left: 1 + r.extraCallbacks, due: time.Now()}
	if !s.cb.push(d) {
		s.log.Warn("fakepay: callback queue full; callback dropped", "key", d.key, "event_id", d.eventID)
	}
}

// requeueCallbacks queues, at start, the callbacks of final charges that
// were not delivered before the restart, oldest charge first.
func (s *Server) requeueCallbacks() {
	s.mu.Lock()
	defer s.mu.Unlock()
	var todo []*record
	for _, r := range s.charges {
		if !r.callbackDone && r.Status != payment.StatusPending {
			todo = append(todo, r)
		}
	}
	slices.SortFunc(todo, func(a, b *record) int {
		na, _ := refNumber(a.ProviderRef)
		nb, _ := refNumber(b.ProviderRef)
		return na - nb
	})
	for _, r := range todo {
		s.enqueueCallback(r)
	}
}

// deliverLoop makes the queued deliveries, one at a time, until Close.
func (s *Server) deliverLoop() {
	defer close(s.done)
	ctx := s.stopCtx
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for ctx.Err() == nil {
		d, wait, queued := s.cb.next(time.Now())
		if d == nil {
			var fire <-chan time.Time
			if queued {
				timer.Reset(wait)
				fire = timer.C
			}
			select {
			case <-ctx.Done():
			case <-s.cb.wake:
			case <-fire:
			}
			timer.Stop()
			continue
		}
		ok := s.post(ctx, d)
		s.finish(ctx, d, ok)
	}
}

// post makes one delivery attempt. 2xx and 409 (the receiver already has
// the event) count as delivered.
func (s *Server) post(ctx context.Context, d *delivery) bool {
	actx, cancel := context.WithTimeout(ctx, CallbackAttemptTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(actx, http.MethodPost, s.cbURL, bytes.NewReader(d.body))
	if err != nil {
		s.log.Error("fakepay: callback request", "err", err)
		return false
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(payment.SignatureHeader, payment.SignCallback(s.secret, d.body, s.clock()))
	s.cb.mu.Lock()
	s.cb.stats.Attempts++
	s.cb.mu.Unlock()
	resp, err := s.client.Do(req)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("fakepay: callback failed", "key", d.key, "event_id", d.eventID, "try", d.tries+1, "err", err)
		}
		return false
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	if resp.StatusCode/100 == 2 || resp.StatusCode == http.StatusConflict {
		return true
	}
	s.log.Warn("fakepay: callback refused", "key", d.key, "event_id", d.eventID, "try", d.tries+1, "status", resp.StatusCode)
	return false
}

// finish records the outcome of an attempt: the next duplicate, a retry
// after a backoff, or the end of the delivery, which is written to the
// data file so that a restart does not make it again.
func (s *Server) finish(ctx context.Context, d *delivery, ok bool) {
	terminal, givenUp := false, false
	s.cb.mu.Lock()
	switch {
	case ok:
		s.cb.stats.Delivered++
		d.left--
		d.tries = 0
		d.due = time.Now()
		terminal = d.left <= 0
	case ctx.Err() != nil:
		// Closing: abandon without counting; a restart with a data file
		// delivers it again.
		s.cb.busy--
		s.cb.mu.Unlock()
		return
	default:
		d.tries++
		if d.tries >= s.attempts {
			s.cb.stats.GivenUp++
			terminal, givenUp = true, true
		} else {
			d.due = time.Now().Add(s.retryWait(d.tries))
		}
	}
	if !terminal {
		s.cb.items = append(s.cb.items, d)
		s.cb.busy--
		s.cb.mu.Unlock()
		return
	}
	s.cb.mu.Unlock()

	if givenUp {
		s.log.Warn("fakepay: callback given up", "key", d.key, "event_id", d.eventID, "attempts", s.attempts)
	}
	s.mu.Lock()
	if r, found := s.charges[d.key]; found && eventID(r.PaymentRequestID, r.Status) == d.eventID {
		r.callbackDone = true
		if err := s.write(entry{Op: opCallback, Key: d.key, EventID: d.eventID, GivenUp: givenUp}); err != nil {
			s.log.Error("fakepay: record callback", "key", d.key, "err", err)
		}
	}
	s.mu.Unlock()
	s.cb.mu.Lock()
	s.cb.busy--
	s.cb.mu.Unlock()
}

// retryWait is the jittered wait after the n-th failed attempt: between
// half and all of backoff·2^(n-1), capped at MaxCallbackBackoff.
func (s *Server) retryWait(n int) time.Duration {
	d := s.backoff
	for i := 1; i < n && d < MaxCallbackBackoff; i++ {
		d *= 2
	}
	d = min(d, MaxCallbackBackoff)
	return d/2 + rand.N(d/2+1)
}
