package orders

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/quorumlock/quorumlock/internal/failpoint"
	"github.com/quorumlock/quorumlock/orders/idem"
	"github.com/quorumlock/quorumlock/orders/problem"
	"github.com/quorumlock/quorumlock/orders/request"
	"github.com/quorumlock/quorumlock/orders/store"
	"github.com/quorumlock/quorumlock/quorum"
)

// Headers of the HTTP contract.
const (
	HeaderIdempotencyKey = "Idempotency-Key"
	HeaderReplayed       = "Idempotent-Replayed"
)

// Reply is a complete HTTP answer: status, headers and body bytes.
type Reply struct {
	Status int
	Header http.Header
	Body   []byte
}

// jsonReply is the one place a status and a body become a response: the
// content type follows from the status (contentTypeFor), for first answers
// and replays alike.
func jsonReply(status int, body []byte) Reply {
	h := http.Header{}
	h.Set("Content-Type", contentTypeFor(status))
	if status == http.StatusCreated {
		// A created order, first answer or replay: point at it.
		var o struct {
			OrderID string `json:"orderId"`
		}
		if json.Unmarshal(body, &o) == nil && o.OrderID != "" {
			h.Set("Location", "/orders/"+url.PathEscape(o.OrderID))
		}
	}
	return Reply{Status: status, Header: h, Body: body}
}

// contentTypeFor is the media type of a saved snapshot: a problem for
// errors, plain JSON for successes.
func contentTypeFor(status int) string {
	if status >= 400 {
		return problem.ContentType
	}
	return "application/json"
}

func problemReply(p problem.Problem) Reply {
	body, err := problem.Encode(p)
	if err != nil {
		body = []byte(`{"status":500,"title":"Internal Server Error"}`)
	}
	h := http.Header{}
	for k, v := range p.Header {
		h[k] = append([]string(nil), v...)
	}
	h.Set("Content-Type", problem.ContentType)
	return Reply{Status: problem.StatusOf(p), Header: h, Body: body}
}

// saved is the idempotency record's copy of a reply.
func (r Reply) saved() idem.Response {
	return idem.Response{Status: r.Status, ContentType: r.Header.Get("Content-Type"), Body: r.Body}
}

// replay answers a saved snapshot again. Its Content-Type follows from the
// saved status, as for a first answer: a content type kept beside the
// snapshot (in Redis) is never sent back verbatim.
func replay(status int, body []byte) Reply {
	r := jsonReply(status, body)
	r.Header.Set(HeaderReplayed, "true")
	return r
}

// requestLocation is where a client polls a request still in progress.
// The key travels in the query, so keys such as ".." survive path cleaning.
func requestLocation(key string) string {
	return "/orders/requests?" + url.Values{"key": {key}}.Encode()
}

// Create places the order o for user under the client's idempotency key, or
// answers from what an earlier attempt with the same key saved. It never
// returns an error: every outcome is a Reply.
//
// The key was checked where it entered (request.IdempotencyKey); user is
// the token's subject.
func (s *Service) Create(ctx context.Context, user string, key request.Key, o request.Order) Reply {
	start := time.Now()
	rl := &requestLog{idem: "off"}
	r := s.create(ctx, rl, user, key, o)
	s.logRequest(ctx, rl, user, key, o, r, time.Since(start))
	return r
}

// create is Create, noting in rl what happened.
func (s *Service) create(ctx context.Context, rl *requestLog, user string, key request.Key, o request.Order) Reply {
	fp := o.Fingerprint()
	if key.IsZero() {
		return problemReply(problem.InvalidIdempotencyKey("the Idempotency-Key header is required"))
	}
	k, err := idem.NewKey(user, key)
	if err != nil {
		// A user id the token verifier would not accept: a wiring fault,
		// not the client's.
		s.log.Error("idempotency key refused", "err", err)
		return problemReply(problem.Internal("the request could not be keyed"))
	}
	owner := idem.NewOwner()
	claimed := false
	if s.idem != nil {
		res, err := s.idem.Claim(ctx, k, fp, owner)
		outcome := "UNAVAILABLE"
		if err == nil {
			outcome = res.Outcome.String()
		}
		s.metrics.claim(outcome)
		rl.idem = outcome
		switch {
		case err != nil && ctx.Err() != nil:
			return problemReply(problem.ServiceUnavailable("request cancelled", s.retry))
		case err != nil:
			// The fast path is down: Postgres arbitrates alone. The script
			// may still have run with its reply lost, so the claim is
			// settled anyway; Complete and Release check the owner.
			s.log.Warn("idempotency claim unavailable; Postgres arbitrates", "err", err)
			claimed = true
		case res.Outcome == idem.Success:
			s.placed(rl, "replayed")
			return replay(res.Response.Status, res.Response.Body)
		case res.Outcome == idem.InProgress:
			s.placed(rl, "in_progress")
			return s.busy(key, res.Lease)
		case res.Outcome == idem.FingerprintMismatch:
			s.placed(rl, "fingerprint_mismatch")
			return s.keyReused()
		case res.Outcome == idem.Takeover:
			// The previous attempt's processing lease ran out. Postgres says
			// whether it left an outcome before this attempt proceeds.
			if r, done := s.afterTakeover(ctx, rl, k, key, fp, owner); done {
				return r
			}
			claimed = true
		default: // idem.Created
			claimed = true
		}
	}
	s.failpoints.Hit(failpoint.AfterClaim)
	// The work must end before the processing lease does, or a retry
	// would take the request over while it still runs.
	pctx, cancel := context.WithTimeout(ctx, s.budget())
	reply, v, lease := s.place(pctx, rl, user, key, fp, o)
	cancel()
	if claimed {
		s.settleClaim(ctx, k, owner, reply, v)
	}
	s.failpoints.Hit(failpoint.AfterSuccess)
	s.unlock(ctx, rl, lease)
	return reply
}

// keyReused answers a key reused with a different payload: 409, or 422
// with CodesIETF.
func (s *Service) keyReused() Reply {
	if s.codes == CodesIETF {
		return problemReply(problem.KeyReused())
	}
	return problemReply(problem.FingerprintMismatch())
}

// busy answers a POST whose key another attempt is processing: the 202 of
// inProgress, or with CodesIETF a 409 problem with the same Retry-After
// and Location.
func (s *Service) busy(key request.Key, lease time.Duration) Reply {
	if s.codes != CodesIETF {
		return s.inProgress(key, lease)
	}
	r := problemReply(problem.RequestInProgress(s.pollWait(lease)))
	r.Header.Set("Location", requestLocation(key.String()))
	return r
}

// pollWait is the Retry-After for a request in flight: the rest of its
// processing lease, from 1 s up to the configured retry delay.
func (s *Service) pollWait(lease time.Duration) time.Duration {
	return min(max(lease, time.Second), s.retry)
}

// inProgress is the 202 for a request another attempt is processing. The
// poll (GET /orders/requests) answers it with either code set.
func (s *Service) inProgress(key request.Key, lease time.Duration) Reply {
	wait := s.pollWait(lease)
	r := jsonReply(http.StatusAccepted, []byte(`{"status":"IN_PROGRESS"}`))
	r.Header.Set("Retry-After", problem.RetryAfter(wait))
	r.Header.Set("Location", requestLocation(key.String()))
	return r
}

// afterTakeover checks Postgres for the outcome of an attempt whose
// processing lease expired. done is false when there is provably none, so
// this attempt may proceed.
func (s *Service) afterTakeover(ctx context.Context, rl *requestLog, k idem.Key, key request.Key, fp, owner string) (Reply, bool) {
	out, err := s.store.Lookup(ctx, k.User(), key)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return Reply{}, false
	case err != nil:
		// Neither side can tell what the earlier attempt did: say so, and
		// keep the claim, so the next attempt checks again.
		s.log.Error("takeover: outcome unknown", "err", err)
		return problemReply(problem.OutcomeUnknown(s.idem.Lease())), true
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if out.Fingerprint != fp {
		_ = s.idem.Release(sctx, k, owner)
		s.placed(rl, "fingerprint_mismatch")
		return s.keyReused(), true
	}
	s.metrics.repair()
	s.metrics.place("replayed")
	rl.result = "repaired"
	r := replay(out.ResponseStatus, out.ResponseBody)
	if err := s.idem.Repair(sctx, k, fp, r.saved()); err != nil {
		s.log.Warn("takeover: repair of the idempotency record failed", "err", err)
	}
	return r, true
}

// settleClaim records a final answer in Redis, or drops the claim so that
// a retry can proceed.
func (s *Service) settleClaim(ctx context.Context, k idem.Key, owner string, r Reply, v verdict) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	var err error
	switch v {
	case final:
		err = s.idem.Complete(ctx, k, owner, r.saved())
	case retryable:
		err = s.idem.Release(ctx, k, owner)
	case unknown:
		// Keep the claim: when its lease expires, the next attempt asks
		// Postgres before it proceeds.
	}
	if err != nil {
		// Postgres holds the truth; the next attempt repairs Redis.
		s.log.Warn("idempotency record not updated", "verdict", v, "err", err)
	}
}

// verdict says what a reply means for the idempotency record.
type verdict int

const (
	// retryable: nothing was saved; drop the claim so a retry proceeds.
	retryable verdict = iota
	// final: the saved answer of (user, key); record it in Redis.
	final
	// unknown: the outcome is in doubt; keep the claim, so the attempt
	// after its lease expires asks Postgres first.
	unknown
)

// place locks the product's stock (or arbitrates with Postgres alone) and
// runs the order transaction. The returned lease, when not nil, is still
// held.
func (s *Service) place(ctx context.Context, rl *requestLog, user string, key request.Key, fp string, o request.Order) (Reply, verdict, Lease) {
	id, err := newOrderID()
	if err != nil {
		s.log.Error("order id", "err", err)
		return problemReply(problem.Internal("the order could not be placed")), retryable, nil
	}
	p := store.PlaceOrder{
		UserID: user, IdempotencyKey: key, Fingerprint: fp,
		ProductID: o.ProductID, Quantity: int64(o.Quantity),
		OrderID:    id,
		Created:    created(id, o),
		OutOfStock: outOfStock(o),
	}
	for attempt := 1; ; attempt++ {
		rl.attempts = attempt
		lease, fence, r, ok := s.fence(ctx, rl, p.ProductID)
		if !ok {
			return r, retryable, nil
		}
		p.Fence, p.FenceKey = fence, ""
		if fence == 0 { // Postgres arbitrates alone: the fence is taken in the transaction
			p.FenceKey = stockKey(p.ProductID)
		}
		out, err := s.store.PlaceOrder(ctx, p)
		switch {
		case err == nil && out.Replayed:
			s.placed(rl, "replayed")
			return replay(out.ResponseStatus, out.ResponseBody), final, lease
		case err == nil:
			s.placed(rl, "created")
			s.failpoints.Hit(failpoint.AfterCommit)
			return jsonReply(out.ResponseStatus, out.ResponseBody), final, lease
		case errors.Is(err, store.ErrOutOfStock):
			s.placed(rl, "out_of_stock")
			r := jsonReply(out.ResponseStatus, out.ResponseBody)
			if out.Replayed {
				r.Header.Set(HeaderReplayed, "true")
			}
			return r, final, lease
		case errors.Is(err, store.ErrFingerprintMismatch):
			s.placed(rl, "fingerprint_mismatch")
			return s.keyReused(), retryable, lease
		case errors.Is(err, store.ErrUnknownProduct):
			s.placed(rl, "unknown_product")
			return problemReply(problem.UnknownProduct(p.ProductID)), retryable, lease
		case errors.Is(err, store.ErrStaleFence):
			// A newer holder wrote first: this lease was lost. Take a new
			// one and try again, a bounded number of times.
			s.placed(rl, "stale_fence")
			s.unlock(ctx, rl, lease)
			if attempt < s.attempts && ctx.Err() == nil {
				continue
			}
			return problemReply(problem.ServiceUnavailable("the stock changed hands during the request; retry", s.retry)), retryable, nil
		case errors.Is(err, store.ErrInvalid):
			// The request was validated already: this is a wiring fault
			// (say, a locker without a Fencer), not the client's.
			s.placed(rl, "invalid")
			s.log.Error("place order refused its input", "err", err)
			return problemReply(problem.Internal("the order could not be placed")), retryable, lease
		}
		// The transaction failed in a way that may or may not have
		// committed. Postgres can tell.
		s.placed(rl, "error")
		s.log.Error("place order failed", "err", err)
		r, v := s.ambiguous(ctx, user, key, fp)
		return r, v, lease
	}
}

// ambiguous answers after a transaction whose commit is in doubt.
func (s *Service) ambiguous(ctx context.Context, user string, key request.Key, fp string) (Reply, verdict) {
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Second)
	defer cancel()
	out, err := s.store.Lookup(lctx, user, key)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return problemReply(problem.ServiceUnavailable("the order could not be placed; retry with the same Idempotency-Key", s.retry)), retryable
	case err == nil && out.Fingerprint == fp:
		return replay(out.ResponseStatus, out.ResponseBody), final
	case err == nil:
		return s.keyReused(), retryable
	}
	wait := s.retry
	if s.idem != nil {
		wait = s.idem.Lease() // the kept claim sends the next attempt to Postgres after its lease
	}
	return problemReply(problem.OutcomeUnknown(wait)), unknown
}

// fence takes the stock lock and its fence, or, when the lock cannot be
// had, fence 0 (FallbackDB: the order transaction takes its fence once it
// holds the stock row) or a 503 (FallbackReject). ok is false when r is the
// answer.
func (s *Service) fence(ctx context.Context, rl *requestLog, productID string) (lease Lease, fence int64, r Reply, ok bool) {
	// An unknown product gets no lock and no fence counter: bad input
	// writes nothing.
	if _, err := s.store.Stock(ctx, productID); errors.Is(err, store.ErrNotFound) {
		s.placed(rl, "unknown_product")
		return nil, 0, problemReply(problem.UnknownProduct(productID)), false
	} else if err != nil {
		s.log.Error("read stock", "err", err)
		return nil, 0, problemReply(problem.ServiceUnavailable("the order database is unavailable", s.retry)), false
	}
	key := stockKey(productID)
	if s.locker != nil {
		start := time.Now()
		l, err := s.locker.Lock(ctx, key)
		rl.locked(key, l, time.Since(start))
		switch {
		case err == nil:
			s.failpoints.Hit(failpoint.AfterLock)
			return l, l.Fence(), Reply{}, true
		case ctx.Err() != nil:
			return nil, 0, problemReply(problem.ServiceUnavailable("request cancelled or out of time", s.retry)), false
		case errors.Is(err, quorum.ErrNotAcquired):
			// The lock works and someone else holds it: contention, not
			// an outage. Going around it would only make the holder's
			// fence stale.
			s.placed(rl, "lock_busy")
			return nil, 0, problemReply(problem.ServiceUnavailable("the product is busy; retry", s.retry)), false
		case !errors.Is(err, quorum.ErrQuorumUnavailable):
			// The lock was won but its fence could not be taken: the
			// database, not contention.
			s.placed(rl, "error")
			s.log.Error("stock lock: fence unavailable", "key", key, "err", err)
			return nil, 0, problemReply(problem.ServiceUnavailable("the order database is unavailable", s.retry)), false
		case s.fallback == FallbackReject:
			s.metrics.fallback(string(FallbackReject))
			rl.fallback = string(FallbackReject)
			s.log.Warn("stock lock unavailable; rejecting", "key", key, "err", err)
			return nil, 0, problemReply(problem.ServiceUnavailable("the stock lock is unavailable", s.retry)), false
		}
		s.metrics.fallback(string(FallbackDB))
		rl.fallback = string(FallbackDB)
		s.log.Warn("stock lock quorum unavailable; Postgres arbitrates", "key", key, "err", err)
	}
	// The fence is taken inside the order transaction, once it holds the
	// stock row (PlaceOrder.FenceKey): writers get fences in the order
	// they get the row and never make each other's fences stale.
	return nil, 0, Reply{}, true
}

// newOrderID returns a random order id: "ord_" followed by 128 random bits
// in hex.
func newOrderID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("orders: order id: %w", err)
	}
	return "ord_" + hex.EncodeToString(b[:]), nil
}

// createdBody is the 201 body: the fields the HTTP contract names, in a
// fixed order, so a replay is byte-identical.
type createdBody struct {
	OrderID   string `json:"orderId"`
	Status    string `json:"status"`
	ProductID string `json:"productId"`
	Quantity  int    `json:"quantity"`
}

// created renders the answer saved with a new order: 201 and its body.
func created(id string, o request.Order) store.Snapshot {
	body, err := json.Marshal(createdBody{OrderID: id, Status: string(store.StatusCreated), ProductID: o.ProductID, Quantity: o.Quantity})
	if err != nil {
		panic(err) // strings and an int always marshal
	}
	return store.Snapshot{Status: http.StatusCreated, Body: body}
}

// outOfStock renders the rejection saved when the stock is short: the same
// problem document the API sends for it.
func outOfStock(o request.Order) store.Snapshot {
	p := problem.OutOfStock(o.ProductID, o.Quantity)
	body, err := problem.Encode(p)
	if err != nil {
		panic(err) // a string and an int always marshal
	}
	return store.Snapshot{Status: problem.StatusOf(p), Body: body}
}
