// Package idem keeps the Redis idempotency records of POST /orders: the fast
// path that tells a retry from a new request.
//
// Redis is a fast path only. Postgres remains the source of truth (the orders
// table has UNIQUE(user_id, idempotency_key) and keeps the response), so a
// lost, expired, evicted or unreachable record costs a trip to Postgres, never
// a duplicate order. Callers treat ErrUnavailable and ErrCorrupt as "ask
// Postgres".
//
// # Records
//
// One record per (user, Idempotency-Key), under the Redis key built by NewKey
// (idem:orders:<user>:<key>, with the user id escaped so that namespaces of
// different users never collide). The record is a hash:
//
//	state          IN_PROGRESS or SUCCESS
//	fingerprint    the request fingerprint (see package request)
//	owner          the attempt that holds or held the processing lease
//	started_at     creation time, Unix milliseconds, node clock
//	attempts       1 on creation, +1 per takeover
//	lease_until    end of the processing lease, Unix milliseconds, node clock (IN_PROGRESS)
//	taken_over_at  time of the last takeover (after a takeover)
//	status, content_type, body   the saved response (SUCCESS)
//	location                     the resource the response names, or "" (SUCCESS)
//	completed_at   time it became SUCCESS
//	repaired_at    time Repair wrote it (after a repair)
//
// The record expires TTL (default 24h, WithTTL) after its creation; Complete
// keeps that expiry. All lease arithmetic uses the node's TIME, so client
// clocks do not matter.
//
// # Flow
//
// Claim answers one of five outcomes (see Outcome). On CREATED the caller does
// the work and then calls Complete with the response to save, or Release when
// nothing was done and nothing should be saved (validation errors, transient
// 5xx), so that a retry can proceed. On TAKEOVER an earlier attempt ran out of
// lease: the caller must ask Postgres whether that attempt took effect, then
// Repair (the order exists), proceed (it provably does not) or answer 503
// (it cannot tell). Each operation is one Lua script (claim.lua, complete.lua,
// release.lua, repair.lua), run with EVALSHA, keys in KEYS and arguments in
// ARGV.
//
// # Nodes
//
// New takes a list of independent Redis nodes. Each record lives on exactly
// one of them, chosen by hashing its Redis key (FNV-1a, then jump consistent
// hashing), so every instance with the same node list picks the same node.
// There is no replication or quorum here: when a node is lost or the list
// changes, the records on it are simply not found, and Postgres answers.
package idem

import (
	"context"
	"crypto/rand"
	_ "embed" // the scripts
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/internal/option"
)

// Sentinel errors. Errors returned by a Store wrap at least one of them.
var (
	// ErrInvalidArgument: a bad argument or option. Nothing was sent to Redis.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrUnavailable: Redis did not answer, or answered with an error (the
	// underlying error is wrapped too, so errors.Is also finds, for example,
	// context.DeadlineExceeded). The outcome of the operation is unknown.
	ErrUnavailable = errors.New("redis unavailable")
	// ErrCorrupt: the key holds something that is not a record (another
	// type, or an unknown state).
	ErrCorrupt = errors.New("corrupt idempotency record")
	// ErrNotFound: there is no record.
	ErrNotFound = errors.New("no idempotency record")
	// ErrNotOwner: the record is not IN_PROGRESS under the caller's owner id:
	// another owner took it over, or (Release) it is already SUCCESS.
	ErrNotOwner = errors.New("not the owner of the idempotency record")
)

// Defaults.
const (
	// DefaultTTL is how long a record lives after its creation.
	DefaultTTL = 24 * time.Hour
	// DefaultLease is the processing lease of a claim.
	DefaultLease = 10 * time.Second
)

var (
	//go:embed claim.lua
	claimLua string
	//go:embed complete.lua
	completeLua string
	//go:embed release.lua
	releaseLua string
	//go:embed repair.lua
	repairLua string
)

// Outcome is the result of a Claim.
type Outcome int

// Claim outcomes.
const (
	// Created: there was no record; the caller now owns a new IN_PROGRESS
	// record and should process the request.
	Created Outcome = iota + 1
	// InProgress: another owner holds an unexpired lease. Result.Lease is
	// what is left of it (a Retry-After).
	InProgress
	// Success: the request was processed; Result.Response is the saved
	// response to replay.
	Success
	// FingerprintMismatch: the key was used for a different request. This
	// wins over every state.
	FingerprintMismatch
	// Takeover: the previous owner's lease had run out and the caller now
	// owns the record (attempts was incremented). The earlier attempt may
	// have taken effect: check Postgres before doing anything.
	Takeover
)

// String returns the outcome's name as the scripts spell it.
func (o Outcome) String() string {
	switch o {
	case Created:
		return "CREATED"
	case InProgress:
		return "IN_PROGRESS"
	case Success:
		return "SUCCESS"
	case FingerprintMismatch:
		return "FINGERPRINT_MISMATCH"
	case Takeover:
		return "TAKEOVER"
	}
	return "Outcome(" + strconv.Itoa(int(o)) + ")"
}

func parseOutcome(s string) (Outcome, bool) {
	for o := Created; o <= Takeover; o++ {
		if o.String() == s {
			return o, true
		}
	}
	return 0, false
}

// State is the state of a record.
type State string

// Record states.
const (
	StateInProgress State = "IN_PROGRESS"
	StateSuccess    State = "SUCCESS"
)

// Response is a saved HTTP response.
type Response struct {
	// Status is the HTTP status code, 100..599.
	Status int
	// ContentType is the Content-Type header value.
	ContentType string
	// Body is the body, byte for byte.
	Body []byte
	// Location is the resource the response names (its Location header),
	// empty when it names none.
	Location string
}

func (r Response) validate() error {
	if r.Status < 100 || r.Status > 599 {
		return fmt.Errorf("idem: %w: response status %d is outside 100..599", ErrInvalidArgument, r.Status)
	}
	return nil
}

// Result is the answer of Claim.
type Result struct {
	// Outcome says what happened.
	Outcome Outcome
	// Attempts is the record's attempt count: 1 after a creation, +1 per
	// takeover.
	Attempts int64
	// StartedAt is when the record was created (node clock, millisecond
	// precision).
	StartedAt time.Time
	// Lease is, for Created and Takeover, how long the caller's lease runs;
	// for InProgress, what is left of the holder's lease. Zero otherwise.
	Lease time.Duration
	// Response is the saved response, for Success only.
	Response *Response
	// Node is the index of the node that holds the record.
	Node int
}

// Record is a snapshot of a record, as Get returns it.
type Record struct {
	State       State
	Fingerprint string
	Owner       string
	// StartedAt and LeaseUntil are node-clock times (LeaseUntil is zero for
	// SUCCESS records).
	StartedAt  time.Time
	LeaseUntil time.Time
	// LeaseLeft is what was left of an IN_PROGRESS record's lease when it
	// was read, measured on the node's own clock, so it does not depend on
	// how far the caller's clock is from the node's. Zero when the lease
	// has run out, and for SUCCESS records.
	LeaseLeft time.Duration
	Attempts  int64
	// Response is the saved response (SUCCESS only).
	Response *Response
	// TTL is the time left before the record expires, or a negative value
	// when it has no expiry.
	TTL time.Duration
	// Node is the index of the node that holds the record.
	Node int
}

// Option configures New. A nil option is an error.
type Option func(*config) error

// errOption is what a nil option's error wraps.
var errOption = fmt.Errorf("idem: %w", ErrInvalidArgument)

type config struct {
	ttl   time.Duration
	lease time.Duration
}

// WithTTL sets how long a record lives after its creation (default
// DefaultTTL). It must be a whole number of milliseconds, at least 1ms, and
// longer than the lease.
func WithTTL(d time.Duration) Option {
	return func(c *config) error {
		if d < time.Millisecond || d%time.Millisecond != 0 {
			return fmt.Errorf("idem: %w: ttl %v is not a positive whole number of milliseconds", ErrInvalidArgument, d)
		}
		c.ttl = d
		return nil
	}
}

// WithLease sets the processing lease of a claim (default DefaultLease): how
// long an owner may work before another attempt may take the record over. It
// must be a whole number of milliseconds, at least 1ms, and shorter than the
// TTL. The caller should bound its own work by the lease.
func WithLease(d time.Duration) Option {
	return func(c *config) error {
		if d < time.Millisecond || d%time.Millisecond != 0 {
			return fmt.Errorf("idem: %w: lease %v is not a positive whole number of milliseconds", ErrInvalidArgument, d)
		}
		c.lease = d
		return nil
	}
}

// Store reads and writes records on a fixed list of Redis nodes. It is safe
// for concurrent use.
type Store struct {
	nodes    []redis.UniversalClient
	ttl      time.Duration
	lease    time.Duration
	claim    *redis.Script
	complete *redis.Script
	release  *redis.Script
	repair   *redis.Script
}

// New returns a Store over nodes: independent Redis masters (no cluster,
// no replicas as separate entries). The list order matters for node choice,
// so every instance must use the same order. It fails with
// ErrInvalidArgument when the list is empty, holds a nil client, or an option
// is invalid. New does not contact the nodes.
func New(nodes []redis.UniversalClient, opts ...Option) (*Store, error) {
	if len(nodes) == 0 {
		return nil, fmt.Errorf("idem: %w: no nodes", ErrInvalidArgument)
	}
	for i, n := range nodes {
		if n == nil {
			return nil, fmt.Errorf("idem: %w: node %d is nil", ErrInvalidArgument, i)
		}
	}
	c := config{ttl: DefaultTTL, lease: DefaultLease}
	if err := option.Apply(&c, opts, errOption); err != nil {
		return nil, err
	}
	if c.lease >= c.ttl {
		return nil, fmt.Errorf("idem: %w: lease %v must be shorter than ttl %v", ErrInvalidArgument, c.lease, c.ttl)
	}
	return &Store{
		nodes:    append([]redis.UniversalClient(nil), nodes...),
		ttl:      c.ttl,
		lease:    c.lease,
		claim:    redis.NewScript(claimLua),
		complete: redis.NewScript(completeLua),
		release:  redis.NewScript(releaseLua),
		repair:   redis.NewScript(repairLua),
	}, nil
}

// TTL returns the record TTL.
func (s *Store) TTL() time.Duration { return s.ttl }

// Lease returns the processing lease.
func (s *Store) Lease() time.Duration { return s.lease }

// NodeIndex returns the index (in the list given to New) of the node that
// holds k's record.
func (s *Store) NodeIndex(k Key) int { return nodeIndex(k.redis, len(s.nodes)) }

// NewOwner returns a fresh random owner id (128 bits or more, printable) for
// one attempt at processing a request.
func NewOwner() string { return rand.Text() }

func ms(d time.Duration) int64 { return d.Milliseconds() }

func fromMs(v int64) time.Time { return time.UnixMilli(v) }

// wrap classifies a Redis error as ErrCorrupt or ErrUnavailable.
func wrap(op string, node int, err error) error {
	var rerr redis.Error
	if errors.As(err, &rerr) {
		msg := rerr.Error()
		if strings.HasPrefix(msg, "WRONGTYPE") || strings.HasPrefix(msg, "IDEMCORRUPT") {
			return fmt.Errorf("idem: %s on node %d: %w: %w", op, node, ErrCorrupt, err)
		}
	}
	return fmt.Errorf("idem: %s on node %d: %w: %w", op, node, ErrUnavailable, err)
}

func checkKey(k Key) error {
	if !k.valid() {
		return fmt.Errorf("idem: %w: zero Key (use NewKey)", ErrInvalidArgument)
	}
	return nil
}

func checkOwner(owner string) error {
	if owner == "" {
		return fmt.Errorf("idem: %w: empty owner", ErrInvalidArgument)
	}
	return nil
}

// Claim claims k's record for a request with the given fingerprint, on
// behalf of owner (a unique id of this attempt, see NewOwner). See Outcome for
// the answers. A repeated Claim by the current owner within its lease answers
// Created or Takeover again without changing anything, so a Claim whose reply
// was lost can be retried.
//
// Errors wrap ErrInvalidArgument (nothing sent), ErrUnavailable or
// ErrCorrupt.
func (s *Store) Claim(ctx context.Context, k Key, fingerprint, owner string) (Result, error) {
	if err := checkKey(k); err != nil {
		return Result{}, err
	}
	if fingerprint == "" {
		return Result{}, fmt.Errorf("idem: %w: empty fingerprint", ErrInvalidArgument)
	}
	if err := checkOwner(owner); err != nil {
		return Result{}, err
	}
	i := s.NodeIndex(k)
	v, err := s.claim.Run(ctx, s.nodes[i], []string{k.redis}, fingerprint, owner, ms(s.lease), ms(s.ttl)).Slice()
	if err != nil {
		return Result{}, wrap("claim", i, err)
	}
	r, err := parseClaim(v)
	if err != nil {
		return Result{}, fmt.Errorf("idem: claim on node %d: %w: %w", i, ErrCorrupt, err)
	}
	r.Node = i
	return r, nil
}

// parseClaim decodes the reply of claim.lua.
func parseClaim(v []any) (Result, error) {
	if len(v) < 4 {
		return Result{}, fmt.Errorf("reply has %d elements, want at least 4", len(v))
	}
	name, ok := v[0].(string)
	if !ok {
		return Result{}, fmt.Errorf("outcome is %T", v[0])
	}
	o, ok := parseOutcome(name)
	if !ok {
		return Result{}, fmt.Errorf("unknown outcome %q", name)
	}
	var nums [3]int64
	for j := range nums {
		if nums[j], ok = v[1+j].(int64); !ok {
			return Result{}, fmt.Errorf("element %d is %T, want an integer", 1+j, v[1+j])
		}
	}
	r := Result{Outcome: o, Attempts: nums[0], StartedAt: fromMs(nums[1])}
	switch o {
	case Created, Takeover, InProgress:
		r.Lease = time.Duration(nums[2]) * time.Millisecond
	case Success:
		if len(v) != 8 {
			return Result{}, fmt.Errorf("SUCCESS reply has %d elements, want 8", len(v))
		}
		status, ok1 := v[4].(int64)
		ct, ok2 := v[5].(string)
		body, ok3 := v[6].(string)
		loc, ok4 := v[7].(string)
		if !ok1 || !ok2 || !ok3 || !ok4 {
			return Result{}, fmt.Errorf("SUCCESS reply has types %T %T %T %T", v[4], v[5], v[6], v[7])
		}
		r.Response = &Response{Status: int(status), ContentType: ct, Body: []byte(body), Location: loc}
	}
	return r, nil
}

// Complete marks k's record SUCCESS with resp as the saved response, if owner
// still owns it. The record keeps its expiry. Completing a record that this
// owner already completed succeeds and keeps the first response.
//
// Errors wrap ErrNotFound (no record: it expired or was deleted; Repair can
// recreate it), ErrNotOwner (another owner took it over), ErrInvalidArgument,
// ErrUnavailable or ErrCorrupt.
func (s *Store) Complete(ctx context.Context, k Key, owner string, resp Response) error {
	if err := checkKey(k); err != nil {
		return err
	}
	if err := checkOwner(owner); err != nil {
		return err
	}
	if err := resp.validate(); err != nil {
		return err
	}
	i := s.NodeIndex(k)
	v, err := s.complete.Run(ctx, s.nodes[i], []string{k.redis}, owner, resp.Status, resp.ContentType, resp.Body, resp.Location).Text()
	if err != nil {
		return wrap("complete", i, err)
	}
	switch v {
	case "OK":
		return nil
	case "NOT_FOUND":
		return fmt.Errorf("idem: complete %s: %w", k.redis, ErrNotFound)
	case "NOT_OWNER":
		return fmt.Errorf("idem: complete %s: %w", k.redis, ErrNotOwner)
	}
	return fmt.Errorf("idem: complete on node %d: %w: unexpected reply %q", i, ErrCorrupt, v)
}

// Release deletes k's IN_PROGRESS record if owner owns it, so that a retry
// can proceed at once. Use it when the attempt did nothing that must be
// remembered (a validation error, a transient failure before any write). A
// missing record is not an error.
//
// Errors wrap ErrNotOwner (another owner took it over, or it is SUCCESS and
// was kept), ErrInvalidArgument, ErrUnavailable or ErrCorrupt.
func (s *Store) Release(ctx context.Context, k Key, owner string) error {
	if err := checkKey(k); err != nil {
		return err
	}
	if err := checkOwner(owner); err != nil {
		return err
	}
	i := s.NodeIndex(k)
	v, err := s.release.Run(ctx, s.nodes[i], []string{k.redis}, owner).Text()
	if err != nil {
		return wrap("release", i, err)
	}
	switch v {
	case "OK", "NOT_FOUND":
		return nil
	case "NOT_OWNER":
		return fmt.Errorf("idem: release %s: %w", k.redis, ErrNotOwner)
	case "COMPLETED":
		return fmt.Errorf("idem: release %s: %w: the record is SUCCESS", k.redis, ErrNotOwner)
	}
	return fmt.Errorf("idem: release on node %d: %w: unexpected reply %q", i, ErrCorrupt, v)
}

// Repair writes k's record as SUCCESS with the given fingerprint and
// response, whoever owns it. Use it when Postgres shows that the order
// exists. An existing record keeps its expiry, owner, started_at and
// attempts; a missing one is created with the Store's TTL.
//
// Errors wrap ErrInvalidArgument, ErrUnavailable or ErrCorrupt.
func (s *Store) Repair(ctx context.Context, k Key, fingerprint string, resp Response) error {
	if err := checkKey(k); err != nil {
		return err
	}
	if fingerprint == "" {
		return fmt.Errorf("idem: %w: empty fingerprint", ErrInvalidArgument)
	}
	if err := resp.validate(); err != nil {
		return err
	}
	i := s.NodeIndex(k)
	v, err := s.repair.Run(ctx, s.nodes[i], []string{k.redis}, fingerprint, resp.Status, resp.ContentType, resp.Body, ms(s.ttl), resp.Location).Text()
	if err != nil {
		return wrap("repair", i, err)
	}
	if v != "CREATED" && v != "REPAIRED" {
		return fmt.Errorf("idem: repair on node %d: %w: unexpected reply %q", i, ErrCorrupt, v)
	}
	return nil
}

// Get returns a snapshot of k's record, for inspection (operations, tests).
// Errors wrap ErrNotFound, ErrInvalidArgument, ErrUnavailable or ErrCorrupt.
func (s *Store) Get(ctx context.Context, k Key) (Record, error) {
	if err := checkKey(k); err != nil {
		return Record{}, err
	}
	i := s.NodeIndex(k)
	var (
		all  *redis.MapStringStringCmd
		pttl *redis.DurationCmd
		now  *redis.TimeCmd
	)
	_, err := s.nodes[i].TxPipelined(ctx, func(p redis.Pipeliner) error {
		all = p.HGetAll(ctx, k.redis)
		pttl = p.PTTL(ctx, k.redis)
		now = p.Time(ctx)
		return nil
	})
	if err != nil {
		return Record{}, wrap("get", i, err)
	}
	m := all.Val()
	if len(m) == 0 {
		return Record{}, fmt.Errorf("idem: get %s: %w", k.redis, ErrNotFound)
	}
	rec, err := parseRecord(m)
	if err != nil {
		return Record{}, fmt.Errorf("idem: get on node %d: %w: %w", i, ErrCorrupt, err)
	}
	rec.TTL = pttl.Val()
	if rec.State == StateInProgress {
		rec.LeaseLeft = max(rec.LeaseUntil.Sub(now.Val()), 0)
	}
	rec.Node = i
	return rec, nil
}

func parseRecord(m map[string]string) (Record, error) {
	num := func(name string, required bool) (int64, error) {
		s, ok := m[name]
		if !ok {
			if required {
				return 0, fmt.Errorf("field %s is missing", name)
			}
			return 0, nil
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("field %s: %w", name, err)
		}
		return n, nil
	}
	rec := Record{State: State(m["state"]), Fingerprint: m["fingerprint"], Owner: m["owner"]}
	if rec.State != StateInProgress && rec.State != StateSuccess {
		return Record{}, fmt.Errorf("unknown state %q", rec.State)
	}
	started, err := num("started_at", true)
	if err != nil {
		return Record{}, err
	}
	rec.StartedAt = fromMs(started)
	if rec.Attempts, err = num("attempts", true); err != nil {
		return Record{}, err
	}
	if rec.State == StateInProgress {
		lu, err := num("lease_until", true)
		if err != nil {
			return Record{}, err
		}
		rec.LeaseUntil = fromMs(lu)
		return rec, nil
	}
	status, err := num("status", true)
	if err != nil {
		return Record{}, err
	}
	rec.Response = &Response{Status: int(status), ContentType: m["content_type"], Body: []byte(m["body"]), Location: m["location"]}
	return rec, nil
}
