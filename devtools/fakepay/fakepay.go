// Package fakepay is an HTTP payment provider for the demo, compose and
// tests. Like a real provider it is idempotent on the request key: a
// repeated charge with a known key returns the stored answer and moves no
// money. It fails on demand (declines, lost requests and replies, pending
// charges, duplicated callbacks), counts what happened to each key, can
// keep its state in an append-only data file across restarts, and sends
// signed callbacks when a charge reaches a final status.
//
// A [Server] is also a [payment.Provider] in process, for tests that need
// no HTTP: [Server.Charge] and [Server.Query] play the same faults on the
// same state as the HTTP API (a lost request or reply is
// [payment.ErrTimeout], a refusal [payment.ErrRejected]), and
// [Server.Charges], [Server.Calls] and [Server.TotalCharges] count what
// happened to each payment request id. No production package may import
// it: only devtools/ and integration/ do, and tests.
//
// # Wire protocol
//
// Bodies are JSON; errors are RFC 9457 problems (Content-Type
// application/problem+json).
//
//   - POST /charges with header Idempotency-Key (1..255 visible ASCII
//     characters) and body {"order_id": string,
//     "amount_cents": int > 0} answers 200 with a [Charge]. A repeated key
//     with the same body answers the stored charge with header
//     Idempotent-Replayed: true and moves no money; with a different body
//     it answers 422. A missing key, bad JSON or a bad amount answer 400.
//   - GET /charges/{key} answers 200 with the stored [Charge], or 404.
//     The key is one path segment, escaped: "/" as %2F, "." and ".." as
//     %2E and %2E%2E.
//   - POST /charges/{key}/complete with body {"status": "SUCCEEDED" or
//     "FAILED"} settles a PENDING charge; 404 when there is no charge, 409
//     when it is not pending.
//   - POST /faults with body {"key": string, "fault": string, "count": n}
//     queues faults (see [Fault]) for future charges of key, or of any key
//     when key is "" ([AnyKey]); count defaults to 1.
//   - GET /stats answers [Stats].
//   - GET /healthz answers 200.
//
// # Callbacks
//
// With [WithCallback], when a charge reaches SUCCEEDED or FAILED (at once
// or through /complete), a background worker POSTs a [CallbackEvent] to
// the callback URL, signed in header [payment.SignatureHeader] with
// [payment.SignCallback]. Deliveries that fail (a transport error or a
// status other than 2xx and 409) are retried with a bounded, jittered
// backoff, at most [DefaultCallbackAttempts] attempts by default. The
// event id is stable per charge and final status, so receivers can
// deduplicate on it.
package fakepay

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/quorumlock/quorumlock/internal/option"
	"github.com/quorumlock/quorumlock/orders/payment"
)

// AnyKey, given as the key of a fault, makes the fault apply to the next
// charge of any key. Faults queued for a specific key are used first.
const AnyKey = ""

// Limits and defaults.
const (
	// MaxKeyLen is the longest Idempotency-Key accepted.
	MaxKeyLen = 255
	// MaxFaultCount is the largest count of one fault injection.
	MaxFaultCount = 1000
	// DefaultCallbackAttempts is how many times a callback delivery is
	// tried before it is given up.
	DefaultCallbackAttempts = 8
	// DefaultCallbackBackoff is the wait after the first failed delivery
	// attempt; it doubles after each failure, up to MaxCallbackBackoff.
	DefaultCallbackBackoff = 200 * time.Millisecond
	// MaxCallbackBackoff caps the wait between delivery attempts.
	MaxCallbackBackoff = 10 * time.Second
	// CallbackQueueSize bounds the callback deliveries waiting to be made;
	// a callback that finds the queue full is dropped and counted (the
	// receiver finds the charge by querying it).
	CallbackQueueSize = 1024
	// CallbackAttemptTimeout bounds one callback delivery attempt.
	CallbackAttemptTimeout = 5 * time.Second

	maxQueuedFaults  = 10 * MaxFaultCount
	maxCallbackTries = 100
)

// Fault is a failure the server plays on a future charge request.
type Fault string

// Faults.
const (
	// FaultDecline declines a new charge: FAILED is recorded and answered,
	// and no money moves. On a key already charged it changes nothing.
	FaultDecline Fault = "decline"
	// FaultLoseReply processes the charge request as usual (a new charge
	// is recorded), then closes the connection without an answer.
	FaultLoseReply Fault = "lose_reply"
	// FaultDrop loses the request: nothing is recorded or counted and the
	// connection is closed without an answer.
	FaultDrop Fault = "drop"
	// FaultPending records a new charge as PENDING until it is completed
	// with POST /charges/{key}/complete. On a key already charged it
	// changes nothing.
	FaultPending Fault = "pending"
	// FaultDuplicateCallback makes the callback of a new charge be
	// delivered count+1 times instead of once (count is the count of the
	// injection, which is one fault). On a key already charged it changes
	// nothing.
	FaultDuplicateCallback Fault = "duplicate_callback"
	// FaultReject refuses a new charge as invalid, with 400, as a provider
	// does with a field it cannot take: nothing is recorded, but the
	// request is counted as received. On a key already charged it changes
	// nothing.
	FaultReject Fault = "reject"
)

// valid reports whether f is one of the faults above.
func (f Fault) valid() bool {
	switch f {
	case FaultDecline, FaultLoseReply, FaultDrop, FaultPending, FaultDuplicateCallback, FaultReject:
		return true
	}
	return false
}

// Charge is the provider's record of one charge, as the API answers it.
type Charge struct {
	PaymentRequestID string         `json:"payment_request_id"`
	OrderID          string         `json:"order_id"`
	AmountCents      int64          `json:"amount_cents"`
	Status           payment.Status `json:"status"`
	ProviderRef      string         `json:"provider_ref"`
}

// CallbackEvent is the body of a callback.
type CallbackEvent struct {
	// EventID is stable per charge and final status: a duplicated or
	// retried delivery carries the same id.
	EventID          string         `json:"event_id"`
	PaymentRequestID string         `json:"payment_request_id"`
	Status           payment.Status `json:"status"`
	ProviderRef      string         `json:"provider_ref"`
}

// Stats counts what the server did, for tests.
type Stats struct {
	// Charges is how many times money moved, over all keys: the charges
	// that are SUCCEEDED. An idempotent provider charges each key at most
	// once.
	Charges int `json:"charges"`
	// Requests is how many charge requests were received since the server
	// started (invalid and dropped ones are not counted; those refused by
	// FaultReject are).
	Requests int `json:"requests"`
	// ByKey has an entry for every key with a charge.
	ByKey map[string]KeyStats `json:"by_key"`
	// Callbacks counts callback deliveries since the server started.
	Callbacks CallbackStats `json:"callbacks"`
}

// KeyStats is what happened to one key.
type KeyStats struct {
	// Charged is 1 when money moved for the key, else 0.
	Charged int `json:"charged"`
	// Received counts the charge requests with the key since the server
	// started.
	Received int            `json:"received"`
	Status   payment.Status `json:"status"`
}

// CallbackStats counts callback deliveries.
type CallbackStats struct {
	// Delivered counts deliveries answered with 2xx or 409, duplicates
	// included.
	Delivered int `json:"delivered"`
	// Attempts counts HTTP requests made, failed ones included.
	Attempts int `json:"attempts"`
	// GivenUp counts deliveries abandoned after the last attempt.
	GivenUp int `json:"given_up"`
	// Dropped counts callbacks not queued because the queue was full.
	Dropped int `json:"dropped"`
	// Queued is how many deliveries are waiting or in flight.
	Queued int `json:"queued"`
}

var (
	// ErrInvalid reports bad input or configuration.
	ErrInvalid = errors.New("fakepay: invalid input")
	// ErrNotFound reports a key without a charge.
	ErrNotFound = errors.New("fakepay: no such charge")
	// ErrNotPending reports a completion of a charge that is not pending.
	ErrNotPending = errors.New("fakepay: charge is not pending")
	// ErrMismatch reports a charge request that reuses a key with a
	// different order or amount.
	ErrMismatch = errors.New("fakepay: idempotency key reused with a different request")
	// ErrCorrupt reports a data file that cannot be replayed.
	ErrCorrupt = errors.New("fakepay: corrupt data file")
	// ErrClosed reports a call after Close.
	ErrClosed = errors.New("fakepay: server closed")
)

// Server is the fake provider. It is safe for concurrent use; create it
// with [New] and release it with [Server.Close].
type Server struct {
	config
	handler http.Handler

	mu       sync.Mutex // guards the fields below, and the journal
	closed   bool
	charges  map[string]*record
	faults   map[string][]queuedFault
	received map[string]int
	requests int
	seq      int
	journal  *journal // nil without a data file

	cb        callbackQueue
	stopCtx   context.Context    // cancelled by Close: the worker stops
	stop      context.CancelFunc // cancels stopCtx
	done      chan struct{}      // closed when the worker has stopped
	closeOnce sync.Once
	closeErr  error
}

// record is a charge and the state of its callback.
type record struct {
	Charge
	extraCallbacks int
	callbackDone   bool
}

type queuedFault struct {
	kind  Fault
	extra int // FaultDuplicateCallback: extra deliveries
}

// Option configures [New]. A nil option is an error wrapping [ErrInvalid].
type Option func(*config) error

// config is what the options of a Server set.
type config struct {
	clock    func() time.Time
	log      *slog.Logger
	dataPath string
	cbURL    string
	secret   []byte
	client   *http.Client
	attempts int
	backoff  time.Duration
	latency  time.Duration // of the in-process calls; guarded by Server.mu
}

// WithDataFile keeps the state in the file at path: every state change is
// appended as one JSON line and synced to disk before it is answered, and
// New reloads the file, so a restarted server keeps its charges and stays
// idempotent. Queued faults and the request counters of [Stats] are not
// kept. Without it the state lives in memory only.
func WithDataFile(path string) Option {
	return func(c *config) error {
		if path == "" {
			return fmt.Errorf("%w: empty data file path", ErrInvalid)
		}
		c.dataPath = path
		return nil
	}
}

// WithCallback makes the server POST a signed [CallbackEvent] to callbackURL
// (http or https) when a charge reaches a final status. The secret signs
// the callbacks and must not be empty; it is copied.
func WithCallback(callbackURL string, secret []byte) Option {
	return func(c *config) error {
		u, err := url.Parse(callbackURL)
		if err != nil {
			return fmt.Errorf("%w: callback URL: %w", ErrInvalid, err)
		}
		if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("%w: callback URL %q: want an absolute http or https URL", ErrInvalid, u.Redacted())
		}
		if len(secret) == 0 {
			return fmt.Errorf("%w: empty callback secret", ErrInvalid)
		}
		c.cbURL = u.String()
		c.secret = append([]byte(nil), secret...)
		return nil
	}
}

// WithHTTPClient sets the client that delivers callbacks (default: a
// client of its own that does not follow redirects). Close closes its
// idle connections.
func WithHTTPClient(hc *http.Client) Option {
	return func(c *config) error {
		if hc == nil {
			return fmt.Errorf("%w: nil HTTP client", ErrInvalid)
		}
		c.client = hc
		return nil
	}
}

// WithClock sets the clock of the callback signatures' timestamps
// (default time.Now). Retry waits use the real time.
func WithClock(now func() time.Time) Option {
	return func(c *config) error {
		if now == nil {
			return fmt.Errorf("%w: nil clock", ErrInvalid)
		}
		c.clock = now
		return nil
	}
}

// WithCallbackRetry sets how many attempts a callback delivery gets
// (1..100, default [DefaultCallbackAttempts]) and the wait after the first
// failure (default [DefaultCallbackBackoff]), which doubles after each
// failure up to [MaxCallbackBackoff] and is jittered.
func WithCallbackRetry(attempts int, base time.Duration) Option {
	return func(c *config) error {
		if attempts < 1 || attempts > maxCallbackTries {
			return fmt.Errorf("%w: callback attempts %d, want 1..%d", ErrInvalid, attempts, maxCallbackTries)
		}
		if base <= 0 {
			return fmt.Errorf("%w: callback backoff %v", ErrInvalid, base)
		}
		c.attempts, c.backoff = attempts, base
		return nil
	}
}

// WithLogger sets where callback failures and data file repairs are logged
// (default: nowhere).
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return fmt.Errorf("%w: nil logger", ErrInvalid)
		}
		c.log = l
		return nil
	}
}

// New returns a server with the state of its data file, if any, and starts
// its callback worker when callbacks are configured. Final charges whose
// callback was not delivered before a restart are delivered again. An
// invalid or nil option is an error wrapping [ErrInvalid].
func New(opts ...Option) (*Server, error) {
	c := config{clock: time.Now, log: slog.New(slog.DiscardHandler), attempts: DefaultCallbackAttempts, backoff: DefaultCallbackBackoff}
	if err := option.Apply(&c, opts, ErrInvalid); err != nil {
		return nil, err
	}
	s := &Server{
		config:   c,
		charges:  make(map[string]*record),
		faults:   make(map[string][]queuedFault),
		received: make(map[string]int),
		done:     make(chan struct{}),
	}
	s.cb.wake = make(chan struct{}, 1)
	if s.client == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		s.client = &http.Client{
			Transport:     tr,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	if s.dataPath != "" {
		j, err := openJournal(s.dataPath, s.apply, s.log)
		if err != nil {
			return nil, err
		}
		s.journal = j
	}
	s.handler = s.routes()
	s.stopCtx, s.stop = context.WithCancel(context.Background())
	if s.cbURL == "" {
		close(s.done)
		return s, nil
	}
	s.requeueCallbacks()
	go s.deliverLoop()
	return s, nil
}

// Handler returns the HTTP API of the server.
func (s *Server) Handler() http.Handler { return s.handler }

// Close stops the callback worker and waits for it (deliveries still
// queued are abandoned; with a data file they are made again after a
// restart), then closes the data file. Requests after Close fail with
// [ErrClosed]. Close is idempotent.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		s.stop()
		<-s.done
		s.client.CloseIdleConnections()
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.journal != nil {
			s.closeErr = s.journal.close()
		}
	})
	return s.closeErr
}

// Inject queues fault for future charges of key ([AnyKey] for any key).
// Each of the count faults is used by one charge request, except
// [FaultDuplicateCallback], which is one fault that adds count extra
// deliveries to the callback of one charge. count is 1..[MaxFaultCount].
func (s *Server) Inject(key string, fault Fault, count int) error {
	if !fault.valid() {
		return fmt.Errorf("%w: unknown fault %q", ErrInvalid, fault)
	}
	if key != AnyKey && !validKey(key) {
		return fmt.Errorf("%w: fault key %q", ErrInvalid, key)
	}
	if count < 1 || count > MaxFaultCount {
		return fmt.Errorf("%w: fault count %d, want 1..%d", ErrInvalid, count, MaxFaultCount)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	q := s.faults[key]
	if fault == FaultDuplicateCallback {
		if len(q)+1 > maxQueuedFaults {
			return fmt.Errorf("%w: more than %d faults queued for key %q", ErrInvalid, maxQueuedFaults, key)
		}
		s.faults[key] = append(q, queuedFault{kind: fault, extra: count})
		return nil
	}
	if len(q)+count > maxQueuedFaults {
		return fmt.Errorf("%w: more than %d faults queued for key %q", ErrInvalid, maxQueuedFaults, key)
	}
	for range count {
		q = append(q, queuedFault{kind: fault})
	}
	s.faults[key] = q
	return nil
}

// Lookup returns the charge stored for key, or an error matching
// [ErrNotFound].
func (s *Server) Lookup(key string) (Charge, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.charges[key]
	if !ok {
		return Charge{}, fmt.Errorf("%w: key %q", ErrNotFound, key)
	}
	return r.Charge, nil
}

// Complete settles the PENDING charge of key as [payment.StatusSucceeded]
// or [payment.StatusFailed], as the provider would later on, and returns
// it. It fails with [ErrNotFound] for an unknown key and [ErrNotPending]
// when the charge is not pending.
func (s *Server) Complete(key string, status payment.Status) (Charge, error) {
	if status != payment.StatusSucceeded && status != payment.StatusFailed {
		return Charge{}, fmt.Errorf("%w: cannot complete a charge as %q", ErrInvalid, status)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return Charge{}, ErrClosed
	}
	r, ok := s.charges[key]
	if !ok {
		return Charge{}, fmt.Errorf("%w: key %q", ErrNotFound, key)
	}
	if r.Status != payment.StatusPending {
		return r.Charge, fmt.Errorf("%w: key %q is %s", ErrNotPending, key, r.Status)
	}
	if err := s.write(entry{Op: opComplete, Key: key, Status: status}); err != nil {
		return Charge{}, err
	}
	r.Status = status
	s.enqueueCallback(r)
	return r.Charge, nil
}

// Stats returns a snapshot of the counters.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	st := Stats{Requests: s.requests, ByKey: make(map[string]KeyStats, len(s.charges))}
	for key, r := range s.charges {
		ks := KeyStats{Received: s.received[key], Status: r.Status}
		if r.Status == payment.StatusSucceeded {
			ks.Charged = 1
			st.Charges++
		}
		st.ByKey[key] = ks
	}
	s.mu.Unlock()
	st.Callbacks = s.cb.snapshot()
	return st
}

// chargeResult is what a charge request did.
type chargeResult struct {
	charge   Charge
	replayed bool
	fault    Fault // FaultDrop and FaultLoseReply lose the answer
}

// charge handles one valid charge request.
func (s *Server) charge(key, orderID string, amount int64) (chargeResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return chargeResult{}, ErrClosed
	}
	f := s.takeFault(key)
	res := chargeResult{fault: f.kind}
	if f.kind == FaultDrop {
		return res, nil
	}
	s.requests++
	s.received[key]++
	if _, known := s.charges[key]; f.kind == FaultReject && !known {
		return res, fmt.Errorf("%w: charge %q refused as invalid (injected fault)", ErrInvalid, key)
	}
	if r, ok := s.charges[key]; ok {
		res.charge, res.replayed = r.Charge, true
		if r.OrderID != orderID || r.AmountCents != amount {
			return res, fmt.Errorf("%w: key %q was used for order %q, %d cents", ErrMismatch, key, r.OrderID, r.AmountCents)
		}
		return res, nil
	}
	r := &record{Charge: Charge{
		PaymentRequestID: key,
		OrderID:          orderID,
		AmountCents:      amount,
		Status:           payment.StatusSucceeded,
		ProviderRef:      "ch_" + strconv.Itoa(s.seq+1),
	}}
	switch f.kind {
	case FaultDecline:
		r.Status = payment.StatusFailed
	case FaultPending:
		r.Status = payment.StatusPending
	case FaultDuplicateCallback:
		r.extraCallbacks = f.extra
	}
	if err := s.write(entry{Op: opCharge, Key: key, OrderID: orderID, AmountCents: amount,
		Status: r.Status, ProviderRef: r.ProviderRef, ExtraCallbacks: r.extraCallbacks}); err != nil {
		return chargeResult{}, err
	}
	s.seq++
	s.charges[key] = r
	s.enqueueCallback(r)
	res.charge = r.Charge
	return res, nil
}

// takeFault pops the next fault for key, or for any key. Callers hold mu.
func (s *Server) takeFault(key string) queuedFault {
	for _, k := range []string{key, AnyKey} {
		if q := s.faults[k]; len(q) > 0 {
			if len(q) == 1 {
				delete(s.faults, k)
			} else {
				s.faults[k] = q[1:]
			}
			return q[0]
		}
	}
	return queuedFault{}
}

// write appends e to the data file, if there is one. Callers hold mu.
func (s *Server) write(e entry) error {
	if s.journal == nil {
		return nil
	}
	e.At = s.clock().UTC()
	return s.journal.append(e)
}

// apply replays one data file entry into the state, at load time.
func (s *Server) apply(e entry) error {
	switch e.Op {
	case opCharge:
		if !validKey(e.Key) || e.AmountCents <= 0 || !validStatus(e.Status) || e.ExtraCallbacks < 0 {
			return fmt.Errorf("bad charge entry for key %q", e.Key)
		}
		if _, ok := s.charges[e.Key]; ok {
			return fmt.Errorf("second charge entry for key %q", e.Key)
		}
		s.charges[e.Key] = &record{
			Charge: Charge{PaymentRequestID: e.Key, OrderID: e.OrderID, AmountCents: e.AmountCents,
				Status: e.Status, ProviderRef: e.ProviderRef},
			extraCallbacks: e.ExtraCallbacks,
		}
		if n, ok := refNumber(e.ProviderRef); ok {
			s.seq = max(s.seq, n)
		} else {
			return fmt.Errorf("bad provider ref %q for key %q", e.ProviderRef, e.Key)
		}
	case opComplete:
		r, ok := s.charges[e.Key]
		if !ok || r.Status != payment.StatusPending ||
			(e.Status != payment.StatusSucceeded && e.Status != payment.StatusFailed) {
			return fmt.Errorf("bad completion of key %q as %q", e.Key, e.Status)
		}
		r.Status = e.Status
	case opCallback:
		r, ok := s.charges[e.Key]
		if !ok {
			return fmt.Errorf("callback entry for unknown key %q", e.Key)
		}
		if e.EventID == eventID(r.PaymentRequestID, r.Status) {
			r.callbackDone = true
		}
	default:
		return fmt.Errorf("unknown operation %q", e.Op)
	}
	return nil
}

// validKey reports whether k is an acceptable Idempotency-Key: 1..255
// visible ASCII characters. In a path, a key is one escaped segment ("/"
// as %2F; "." and ".." as %2E and %2E%2E).
func validKey(k string) bool {
	if len(k) == 0 || len(k) > MaxKeyLen {
		return false
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x21 || k[i] > 0x7e {
			return false
		}
	}
	return true
}

func validStatus(st payment.Status) bool {
	switch st {
	case payment.StatusSucceeded, payment.StatusFailed, payment.StatusPending:
		return true
	}
	return false
}

// refNumber parses "ch_<n>".
func refNumber(ref string) (int, bool) {
	if len(ref) < 4 || ref[:3] != "ch_" {
		return 0, false
	}
	n, err := strconv.Atoi(ref[3:])
	return n, err == nil && n > 0
}

// eventID is the callback event id of a charge's final status: stable
// across retries, duplicates and restarts, and different for every key
// and status.
func eventID(key string, status payment.Status) string {
	sum := sha256.Sum256([]byte(key + "\x00" + string(status)))
	return "evt_" + hex.EncodeToString(sum[:12])
}
