package idem_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/devtools/testbed"
	"github.com/quorumlock/quorumlock/devtools/testbed/bedtest"
	"github.com/quorumlock/quorumlock/orders/idem"
	"github.com/quorumlock/quorumlock/orders/request"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if err := shared.Close(); err != nil {
		fmt.Fprintf(os.Stderr, "the shared bed: close: %v\n", err)
		code = max(code, 1)
	}
	if code == 0 {
		// goleak's check of TestMain (VerifyTestMain), once the shared
		// bed is closed.
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: Errors on successful test run: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// shared is the bed of five masters that the package's tests take in turn
// (newFixture); TestMain closes it.
var shared = bedtest.Shared{Options: testbed.Options{Redis: 5}}

// fixture is a Store over the five masters of the shared bed (reset for
// the test: running, healed, empty), plus raw clients to look at what the
// scripts wrote.
type fixture struct {
	bed   *testbed.Bed
	raw   []*redis.Client
	store *idem.Store
}

func newFixture(t *testing.T, opts ...idem.Option) *fixture {
	t.Helper()
	bed := shared.Take(t)
	raw := bedtest.RedisClients(t, bed)
	return &fixture{bed: bed, raw: raw, store: newStore(t, raw, opts...)}
}

func newStore(t *testing.T, raw []*redis.Client, opts ...idem.Option) *idem.Store {
	t.Helper()
	nodes := make([]redis.UniversalClient, len(raw))
	for i, c := range raw {
		nodes[i] = c
	}
	s, err := idem.New(nodes, opts...)
	if err != nil {
		t.Fatalf("idem.New: %v", err)
	}
	return s
}

// key returns a Key unique to the running (sub)test.
func key(t *testing.T, suffix string) idem.Key {
	t.Helper()
	k, err := idem.NewKey("u1001", request.MustKey(t.Name()+"/"+suffix))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// node returns the raw client of the node that holds k.
func (f *fixture) node(k idem.Key) *redis.Client { return f.raw[f.store.NodeIndex(k)] }

// hash returns the raw record of k.
func (f *fixture) hash(t *testing.T, k idem.Key) map[string]string {
	t.Helper()
	m, err := f.node(k).HGetAll(context.Background(), k.String()).Result()
	if err != nil {
		t.Fatalf("HGETALL %s: %v", k, err)
	}
	return m
}

func (f *fixture) pttl(t *testing.T, k idem.Key) time.Duration {
	t.Helper()
	d, err := f.node(k).PTTL(context.Background(), k.String()).Result()
	if err != nil {
		t.Fatalf("PTTL %s: %v", k, err)
	}
	return d
}

// nodeNow returns the clock of the node that holds k, in Unix milliseconds.
func (f *fixture) nodeNow(t *testing.T, k idem.Key) int64 {
	t.Helper()
	now, err := f.node(k).Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return now.UnixMilli()
}

func mustClaim(t *testing.T, s *idem.Store, k idem.Key, fp, owner string, want idem.Outcome) idem.Result {
	t.Helper()
	r, err := s.Claim(context.Background(), k, fp, owner)
	if err != nil {
		t.Fatalf("Claim(%s, %s, %s): %v", k, fp, owner, err)
	}
	if r.Outcome != want {
		t.Fatalf("Claim(%s, %s, %s) = %v, want %v", k, fp, owner, r.Outcome, want)
	}
	return r
}

func atoi(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatalf("%q is not an integer: %v", s, err)
	}
	return n
}

// created201() returns the response the tests save.
func created201() idem.Response {
	return idem.Response{Status: 201, ContentType: "application/json", Body: []byte(`{"orderId":"o1","status":"CREATED"}`), Location: "/orders/o1"}
}

func TestClaim(t *testing.T) {
	const lease, ttl = 10 * time.Second, time.Hour
	f := newFixture(t, idem.WithLease(lease), idem.WithTTL(ttl))
	ctx := context.Background()

	t.Run("created writes an IN_PROGRESS record with lease and ttl", func(t *testing.T) {
		k := key(t, "k")
		before := f.nodeNow(t, k)
		r := mustClaim(t, f.store, k, "fp1", "A", idem.Created)
		after := f.nodeNow(t, k)
		if r.Attempts != 1 || r.Lease != lease || r.Response != nil || r.Node != f.store.NodeIndex(k) {
			t.Fatalf("result %+v", r)
		}
		if ms := r.StartedAt.UnixMilli(); ms < before || ms > after {
			t.Fatalf("started_at %d not within node time [%d, %d]", ms, before, after)
		}
		h := f.hash(t, k)
		if h["state"] != "IN_PROGRESS" || h["fingerprint"] != "fp1" || h["owner"] != "A" || h["attempts"] != "1" {
			t.Fatalf("record %v", h)
		}
		if atoi(t, h["started_at"]) != r.StartedAt.UnixMilli() {
			t.Fatalf("started_at %s, result %d", h["started_at"], r.StartedAt.UnixMilli())
		}
		if got := atoi(t, h["lease_until"]) - atoi(t, h["started_at"]); got != lease.Milliseconds() {
			t.Fatalf("lease_until - started_at = %dms, want %d", got, lease.Milliseconds())
		}
		if d := f.pttl(t, k); d <= ttl-time.Minute || d > ttl {
			t.Fatalf("PTTL = %v, want about %v", d, ttl)
		}
	})

	t.Run("another owner within the lease gets IN_PROGRESS with the time left", func(t *testing.T) {
		k := key(t, "k")
		mustClaim(t, f.store, k, "fp1", "A", idem.Created)
		r := mustClaim(t, f.store, k, "fp1", "B", idem.InProgress)
		if r.Lease <= 0 || r.Lease > lease || r.Attempts != 1 {
			t.Fatalf("result %+v", r)
		}
		if h := f.hash(t, k); h["owner"] != "A" || h["attempts"] != "1" {
			t.Fatalf("IN_PROGRESS answer changed the record: %v", h)
		}
	})

	t.Run("a repeated claim by the owner answers CREATED and changes nothing", func(t *testing.T) {
		k := key(t, "k")
		first := mustClaim(t, f.store, k, "fp1", "A", idem.Created)
		before := f.hash(t, k)
		again := mustClaim(t, f.store, k, "fp1", "A", idem.Created)
		if again.Attempts != 1 || !again.StartedAt.Equal(first.StartedAt) || again.Lease > lease || again.Lease <= 0 {
			t.Fatalf("repeat %+v, first %+v", again, first)
		}
		if after := f.hash(t, k); fmt.Sprint(after) != fmt.Sprint(before) {
			t.Fatalf("repeat changed the record: %v -> %v", before, after)
		}
	})

	t.Run("fingerprint mismatch wins over IN_PROGRESS", func(t *testing.T) {
		k := key(t, "k")
		mustClaim(t, f.store, k, "fp1", "A", idem.Created)
		mustClaim(t, f.store, k, "fp2", "B", idem.FingerprintMismatch)
		// Even for the owner itself.
		mustClaim(t, f.store, k, "fp2", "A", idem.FingerprintMismatch)
		if h := f.hash(t, k); h["fingerprint"] != "fp1" || h["owner"] != "A" || h["state"] != "IN_PROGRESS" {
			t.Fatalf("mismatch changed the record: %v", h)
		}
	})

	t.Run("fingerprint mismatch wins over SUCCESS", func(t *testing.T) {
		k := key(t, "k")
		mustClaim(t, f.store, k, "fp1", "A", idem.Created)
		if err := f.store.Complete(ctx, k, "A", created201()); err != nil {
			t.Fatal(err)
		}
		r := mustClaim(t, f.store, k, "fp2", "B", idem.FingerprintMismatch)
		if r.Response != nil {
			t.Fatalf("mismatch leaked the saved response: %+v", r)
		}
	})

	t.Run("fingerprint mismatch wins over an expired lease", func(t *testing.T) {
		k := key(t, "k")
		mustClaim(t, f.store, k, "fp1", "A", idem.Created)
		expireLease(t, f, k)
		mustClaim(t, f.store, k, "fp2", "B", idem.FingerprintMismatch)
		if h := f.hash(t, k); h["owner"] != "A" || h["attempts"] != "1" {
			t.Fatalf("mismatch took the record over: %v", h)
		}
	})

	t.Run("success replays the saved response", func(t *testing.T) {
		k := key(t, "k")
		mustClaim(t, f.store, k, "fp1", "A", idem.Created)
		if err := f.store.Complete(ctx, k, "A", created201()); err != nil {
			t.Fatal(err)
		}
		r := mustClaim(t, f.store, k, "fp1", "B", idem.Success)
		if r.Response == nil || r.Response.Status != 201 || r.Response.ContentType != created201().ContentType ||
			!bytes.Equal(r.Response.Body, created201().Body) || r.Response.Location != "/orders/o1" || r.Attempts != 1 || r.Lease != 0 {
			t.Fatalf("result %+v", r)
		}
	})

	t.Run("an expired lease is taken over and attempts count", func(t *testing.T) {
		k := key(t, "k")
		first := mustClaim(t, f.store, k, "fp1", "A", idem.Created)
		expireLease(t, f, k)
		before := f.nodeNow(t, k)
		r := mustClaim(t, f.store, k, "fp1", "B", idem.Takeover)
		if r.Attempts != 2 || r.Lease != lease || !r.StartedAt.Equal(first.StartedAt) {
			t.Fatalf("takeover %+v", r)
		}
		h := f.hash(t, k)
		if h["owner"] != "B" || h["attempts"] != "2" || h["state"] != "IN_PROGRESS" {
			t.Fatalf("record after takeover %v", h)
		}
		if lu := atoi(t, h["lease_until"]); lu < before+lease.Milliseconds() || lu > f.nodeNow(t, k)+lease.Milliseconds() {
			t.Fatalf("new lease_until %d not now+lease", lu)
		}
		if atoi(t, h["taken_over_at"]) < before {
			t.Fatalf("taken_over_at %s before the takeover (%d)", h["taken_over_at"], before)
		}
		// The old owner is now just another client.
		mustClaim(t, f.store, k, "fp1", "A", idem.InProgress)
		// The new owner's repeat claim says TAKEOVER again, so it still checks Postgres.
		if r := mustClaim(t, f.store, k, "fp1", "B", idem.Takeover); r.Attempts != 2 {
			t.Fatalf("repeat takeover %+v", r)
		}
		expireLease(t, f, k)
		if r := mustClaim(t, f.store, k, "fp1", "C", idem.Takeover); r.Attempts != 3 {
			t.Fatalf("second takeover %+v", r)
		}
		// An owner whose own lease ran out takes it over again, counted.
		expireLease(t, f, k)
		if r := mustClaim(t, f.store, k, "fp1", "C", idem.Takeover); r.Attempts != 4 {
			t.Fatalf("self takeover %+v", r)
		}
	})

	t.Run("a takeover keeps the record for at least the new lease", func(t *testing.T) {
		k := key(t, "k")
		mustClaim(t, f.store, k, "fp1", "A", idem.Created)
		expireLease(t, f, k)
		if err := f.node(k).PExpire(ctx, k.String(), time.Second).Err(); err != nil {
			t.Fatal(err)
		}
		mustClaim(t, f.store, k, "fp1", "B", idem.Takeover)
		if d := f.pttl(t, k); d <= lease-time.Second || d > lease {
			t.Fatalf("PTTL after takeover near expiry = %v, want about %v", d, lease)
		}
	})

	t.Run("a takeover keeps a longer ttl", func(t *testing.T) {
		k := key(t, "k")
		mustClaim(t, f.store, k, "fp1", "A", idem.Created)
		expireLease(t, f, k)
		mustClaim(t, f.store, k, "fp1", "B", idem.Takeover)
		if d := f.pttl(t, k); d <= ttl-time.Minute {
			t.Fatalf("PTTL after takeover = %v, want about %v", d, ttl)
		}
	})

	t.Run("a hash without state is replaced", func(t *testing.T) {
		k := key(t, "k")
		if err := f.node(k).HSet(ctx, k.String(), "junk", "1").Err(); err != nil {
			t.Fatal(err)
		}
		mustClaim(t, f.store, k, "fp1", "A", idem.Created)
		if h := f.hash(t, k); h["junk"] != "" {
			t.Fatalf("stale field kept: %v", h)
		}
	})

	t.Run("a key of another type is corrupt", func(t *testing.T) {
		k := key(t, "k")
		if err := f.node(k).Set(ctx, k.String(), "x", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		_, err := f.store.Claim(ctx, k, "fp1", "A")
		if !errors.Is(err, idem.ErrCorrupt) || errors.Is(err, idem.ErrUnavailable) {
			t.Fatalf("err = %v, want ErrCorrupt", err)
		}
	})

	t.Run("an unknown state is corrupt", func(t *testing.T) {
		k := key(t, "k")
		if err := f.node(k).HSet(ctx, k.String(), "state", "WEIRD", "fingerprint", "fp1").Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := f.store.Claim(ctx, k, "fp1", "A"); !errors.Is(err, idem.ErrCorrupt) {
			t.Fatalf("err = %v, want ErrCorrupt", err)
		}
	})

	t.Run("bad arguments are rejected before Redis", func(t *testing.T) {
		k := key(t, "k")
		for _, c := range []struct {
			k      idem.Key
			fp, ow string
		}{{idem.Key{}, "fp", "A"}, {k, "", "A"}, {k, "fp", ""}} {
			if _, err := f.store.Claim(ctx, c.k, c.fp, c.ow); !errors.Is(err, idem.ErrInvalidArgument) {
				t.Fatalf("Claim(%q, %q, %q) err = %v", c.k, c.fp, c.ow, err)
			}
		}
		if n, _ := f.node(k).Exists(ctx, k.String()).Result(); n != 0 {
			t.Fatal("a rejected claim wrote a record")
		}
	})

	t.Run("two users with the same key are independent", func(t *testing.T) {
		k1, _ := idem.NewKey("u1", request.MustKey(t.Name()))
		k2, _ := idem.NewKey("u2", request.MustKey(t.Name()))
		mustClaim(t, f.store, k1, "fp1", "A", idem.Created)
		mustClaim(t, f.store, k2, "fp2", "B", idem.Created)
	})
}

// expireLease moves k's lease_until into the past, as if the lease had run
// out, without waiting.
func expireLease(t *testing.T, f *fixture, k idem.Key) {
	t.Helper()
	past := strconv.FormatInt(f.nodeNow(t, k)-1, 10)
	if err := f.node(k).HSet(context.Background(), k.String(), "lease_until", past).Err(); err != nil {
		t.Fatal(err)
	}
}

// TestClaimLeaseRunsOut lets a real lease run out on the node's clock. The
// lease is long enough that the second claim, sent right after the first,
// still finds it running even when each write waits for a slow fsync.
func TestClaimLeaseRunsOut(t *testing.T) {
	const lease = 3 * time.Second
	f := newFixture(t, idem.WithLease(lease), idem.WithTTL(time.Minute))
	k := key(t, "k")
	mustClaim(t, f.store, k, "fp1", "A", idem.Created)
	mustClaim(t, f.store, k, "fp1", "B", idem.InProgress)
	deadline := time.Now().Add(lease + 10*time.Second)
	for {
		r, err := f.store.Claim(context.Background(), k, "fp1", "B")
		if err != nil {
			t.Fatal(err)
		}
		if r.Outcome == idem.Takeover {
			if r.Attempts != 2 {
				t.Fatalf("takeover %+v", r)
			}
			return
		}
		if r.Outcome != idem.InProgress || time.Now().After(deadline) {
			t.Fatalf("waiting for the lease to run out: %+v", r)
		}
		time.Sleep(r.Lease + time.Millisecond)
	}
}

// TestGetLeaseLeft: Get measures what is left of a claim's lease on the
// node's clock; it falls to zero when the lease runs out, while the record
// stays IN_PROGRESS until another attempt takes it over.
func TestGetLeaseLeft(t *testing.T) {
	const lease = 2 * time.Second
	f := newFixture(t, idem.WithLease(lease), idem.WithTTL(time.Minute))
	ctx := context.Background()
	k := key(t, "k")
	mustClaim(t, f.store, k, "fp1", "A", idem.Created)
	rec, err := f.store.Get(ctx, k)
	if err != nil || rec.State != idem.StateInProgress || rec.LeaseLeft <= 0 || rec.LeaseLeft > lease {
		t.Fatalf("Get right after the claim = %+v, %v", rec, err)
	}
	deadline := time.Now().Add(lease + 10*time.Second)
	for rec.LeaseLeft > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the lease never ran out: %+v", rec)
		}
		time.Sleep(rec.LeaseLeft + time.Millisecond)
		if rec, err = f.store.Get(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	if rec.State != idem.StateInProgress || rec.Owner != "A" {
		t.Fatalf("after the lease ran out: %+v", rec)
	}
}

func TestComplete(t *testing.T) {
	f := newFixture(t, idem.WithTTL(time.Hour))
	ctx := context.Background()

	t.Run("owner completes; ttl kept; lease dropped", func(t *testing.T) {
		k := key(t, "k")
		mustClaim(t, f.store, k, "fp1", "A", idem.Created)
		if err := f.node(k).PExpire(ctx, k.String(), 30*time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		if err := f.store.Complete(ctx, k, "A", created201()); err != nil {
			t.Fatalf("Complete: %v", err)
		}
		h := f.hash(t, k)
		if h["state"] != "SUCCESS" || h["status"] != "201" || h["content_type"] != created201().ContentType ||
			h["body"] != string(created201().Body) || h["owner"] != "A" || h["fingerprint"] != "fp1" || h["completed_at"] == "" {
			t.Fatalf("record %v", h)
		}
		if _, ok := h["lease_until"]; ok {
			t.Fatalf("lease_until kept on SUCCESS: %v", h)
		}
		if d := f.pttl(t, k); d > 30*time.Minute || d < 29*time.Minute {
			t.Fatalf("PTTL after Complete = %v, want the 30m set before", d)
		}
	})

	t.Run("another owner cannot complete", func(t *testing.T) {
		k := key(t, "k")
		mustClaim(t, f.store, k, "fp1", "A", idem.Created)
		if err := f.store.Complete(ctx, k, "B", created201()); !errors.Is(err, idem.ErrNotOwner) {
			t.Fatalf("err = %v, want ErrNotOwner", err)
		}
		if h := f.hash(t, k); h["state"] != "IN_PROGRESS" || h["body"] != "" {
			t.Fatalf("record changed: %v", h)
		}
	})

	t.Run("the old owner cannot complete after a takeover", func(t *testing.T) {
		k := key(t, "k")
		mustClaim(t, f.store, k, "fp1", "A", idem.Created)
		expireLease(t, f, k)
		mustClaim(t, f.store, k, "fp1", "B", idem.Takeover)
		if err := f.store.Complete(ctx, k, "A", created201()); !errors.Is(err, idem.ErrNotOwner) {
			t.Fatalf("err = %v, want ErrNotOwner", err)
		}
		if err := f.store.Complete(ctx, k, "B", created201()); err != nil {
			t.Fatalf("new owner: %v", err)
		}
	})

	t.Run("an owner whose lease ran out but was not taken over can complete", func(t *testing.T) {
		k := key(t, "k")
		mustClaim(t, f.store, k, "fp1", "A", idem.Created)
		expireLease(t, f, k)
		if err := f.store.Complete(ctx, k, "A", created201()); err != nil {
			t.Fatalf("Complete: %v", err)
		}
	})

	t.Run("no record", func(t *testing.T) {
		k := key(t, "k")
		if err := f.store.Complete(ctx, k, "A", created201()); !errors.Is(err, idem.ErrNotFound) {
			t.Fatalf("err = %v, want ErrNotFound", err)
		}
		if n, _ := f.node(k).Exists(ctx, k.String()).Result(); n != 0 {
			t.Fatal("Complete created a record")
		}
	})

	t.Run("a repeated complete keeps the first response", func(t *testing.T) {
		k := key(t, "k")
		mustClaim(t, f.store, k, "fp1", "A", idem.Created)
		if err := f.store.Complete(ctx, k, "A", created201()); err != nil {
			t.Fatal(err)
		}
		other := idem.Response{Status: 500, ContentType: "text/plain", Body: []byte("x")}
		if err := f.store.Complete(ctx, k, "A", other); err != nil {
			t.Fatalf("repeat: %v", err)
		}
		if err := f.store.Complete(ctx, k, "B", other); !errors.Is(err, idem.ErrNotOwner) {
			t.Fatalf("other owner on SUCCESS: err = %v", err)
		}
		if h := f.hash(t, k); h["status"] != "201" || h["body"] != string(created201().Body) {
			t.Fatalf("record %v", h)
		}
	})

	t.Run("binary-safe body round trip", func(t *testing.T) {
		k := key(t, "k")
		body := make([]byte, 0, 3*256+4)
		for i := range 256 {
			body = append(body, byte(i))
		}
		body = append(body, 0, 0, 0xff, 0xfe, '\r', '\n', 0x80, 0xc3, 0x28)
		body = append(body, bytes.Repeat([]byte{0}, 256)...)
		resp := idem.Response{Status: 409, ContentType: "application/problem+json; charset=\x00binary", Body: body}
		mustClaim(t, f.store, k, "fp1", "A", idem.Created)
		if err := f.store.Complete(ctx, k, "A", resp); err != nil {
			t.Fatal(err)
		}
		r := mustClaim(t, f.store, k, "fp1", "B", idem.Success)
		if r.Response.Status != 409 || r.Response.ContentType != resp.ContentType || !bytes.Equal(r.Response.Body, body) {
			t.Fatalf("replayed %d %q %x, want %x", r.Response.Status, r.Response.ContentType, r.Response.Body, body)
		}
		rec, err := f.store.Get(ctx, k)
		if err != nil || !bytes.Equal(rec.Response.Body, body) {
			t.Fatalf("Get: %v, body %x", err, rec.Response)
		}
	})

	t.Run("an empty body round-trips as empty", func(t *testing.T) {
		k := key(t, "k")
		mustClaim(t, f.store, k, "fp1", "A", idem.Created)
		if err := f.store.Complete(ctx, k, "A", idem.Response{Status: 204}); err != nil {
			t.Fatal(err)
		}
		r := mustClaim(t, f.store, k, "fp1", "B", idem.Success)
		if r.Response.Status != 204 || len(r.Response.Body) != 0 || r.Response.ContentType != "" {
			t.Fatalf("replayed %+v", r.Response)
		}
	})

	t.Run("bad arguments", func(t *testing.T) {
		k := key(t, "k")
		mustClaim(t, f.store, k, "fp1", "A", idem.Created)
		for _, c := range []struct {
			k    idem.Key
			ow   string
			resp idem.Response
		}{{idem.Key{}, "A", created201()}, {k, "", created201()}, {k, "A", idem.Response{Status: 99}}, {k, "A", idem.Response{Status: 600}}} {
			if err := f.store.Complete(ctx, c.k, c.ow, c.resp); !errors.Is(err, idem.ErrInvalidArgument) {
				t.Fatalf("Complete(%q, %q, %d) err = %v", c.k, c.ow, c.resp.Status, err)
			}
		}
		if h := f.hash(t, k); h["state"] != "IN_PROGRESS" {
			t.Fatalf("rejected Complete changed the record: %v", h)
		}
	})
}

func TestRelease(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()

	t.Run("owner releases; a retry is CREATED", func(t *testing.T) {
		k := key(t, "k")
		mustClaim(t, f.store, k, "fp1", "A", idem.Created)
		if err := f.store.Release(ctx, k, "A"); err != nil {
			t.Fatalf("Release: %v", err)
		}
		if n, _ := f.node(k).Exists(ctx, k.String()).Result(); n != 0 {
			t.Fatal("record still there")
		}
		if r := mustClaim(t, f.store, k, "fp2", "B", idem.Created); r.Attempts != 1 {
			t.Fatalf("retry %+v", r)
		}
	})

	t.Run("another owner cannot release", func(t *testing.T) {
		k := key(t, "k")
		mustClaim(t, f.store, k, "fp1", "A", idem.Created)
		if err := f.store.Release(ctx, k, "B"); !errors.Is(err, idem.ErrNotOwner) {
			t.Fatalf("err = %v, want ErrNotOwner", err)
		}
		if h := f.hash(t, k); h["owner"] != "A" {
			t.Fatalf("record %v", h)
		}
	})

	t.Run("the old owner cannot release after a takeover", func(t *testing.T) {
		k := key(t, "k")
		mustClaim(t, f.store, k, "fp1", "A", idem.Created)
		expireLease(t, f, k)
		mustClaim(t, f.store, k, "fp1", "B", idem.Takeover)
		if err := f.store.Release(ctx, k, "A"); !errors.Is(err, idem.ErrNotOwner) {
			t.Fatalf("err = %v, want ErrNotOwner", err)
		}
		if h := f.hash(t, k); h["owner"] != "B" {
			t.Fatalf("record %v", h)
		}
	})

	t.Run("a SUCCESS record is kept", func(t *testing.T) {
		k := key(t, "k")
		mustClaim(t, f.store, k, "fp1", "A", idem.Created)
		if err := f.store.Complete(ctx, k, "A", created201()); err != nil {
			t.Fatal(err)
		}
		if err := f.store.Release(ctx, k, "A"); !errors.Is(err, idem.ErrNotOwner) {
			t.Fatalf("err = %v, want ErrNotOwner", err)
		}
		mustClaim(t, f.store, k, "fp1", "B", idem.Success)
	})

	t.Run("no record is fine", func(t *testing.T) {
		if err := f.store.Release(ctx, key(t, "k"), "A"); err != nil {
			t.Fatalf("Release of nothing: %v", err)
		}
	})

	t.Run("bad arguments", func(t *testing.T) {
		if err := f.store.Release(ctx, idem.Key{}, "A"); !errors.Is(err, idem.ErrInvalidArgument) {
			t.Fatal(err)
		}
		if err := f.store.Release(ctx, key(t, "k"), ""); !errors.Is(err, idem.ErrInvalidArgument) {
			t.Fatal(err)
		}
	})
}

func TestRepair(t *testing.T) {
	const ttl = time.Hour
	f := newFixture(t, idem.WithTTL(ttl))
	ctx := context.Background()

	t.Run("no record: a SUCCESS record with the full ttl", func(t *testing.T) {
		k := key(t, "k")
		if err := f.store.Repair(ctx, k, "fpdb", created201()); err != nil {
			t.Fatal(err)
		}
		h := f.hash(t, k)
		if h["state"] != "SUCCESS" || h["fingerprint"] != "fpdb" || h["status"] != "201" || h["attempts"] != "0" ||
			h["repaired_at"] == "" || h["started_at"] == "" || h["location"] != "/orders/o1" {
			t.Fatalf("record %v", h)
		}
		if d := f.pttl(t, k); d <= ttl-time.Minute || d > ttl {
			t.Fatalf("PTTL %v, want about %v", d, ttl)
		}
		r := mustClaim(t, f.store, k, "fpdb", "B", idem.Success)
		if !bytes.Equal(r.Response.Body, created201().Body) {
			t.Fatalf("replay %+v", r.Response)
		}
	})

	t.Run("a record in progress under another owner becomes SUCCESS, keeping its metadata", func(t *testing.T) {
		k := key(t, "k")
		mustClaim(t, f.store, k, "fp1", "A", idem.Created)
		expireLease(t, f, k)
		mustClaim(t, f.store, k, "fp1", "B", idem.Takeover)
		if err := f.node(k).PExpire(ctx, k.String(), 20*time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		before := f.hash(t, k)
		if err := f.store.Repair(ctx, k, "fp1", created201()); err != nil {
			t.Fatal(err)
		}
		h := f.hash(t, k)
		if h["state"] != "SUCCESS" || h["owner"] != "B" || h["attempts"] != "2" || h["started_at"] != before["started_at"] ||
			h["body"] != string(created201().Body) {
			t.Fatalf("record %v (before %v)", h, before)
		}
		if _, ok := h["lease_until"]; ok {
			t.Fatalf("lease_until kept: %v", h)
		}
		if d := f.pttl(t, k); d > 20*time.Minute || d < 19*time.Minute {
			t.Fatalf("PTTL %v, want the 20m set before", d)
		}
		// The owner finishing late keeps the repaired response.
		if err := f.store.Complete(ctx, k, "B", idem.Response{Status: 500}); err != nil {
			t.Fatalf("late Complete: %v", err)
		}
		if r := mustClaim(t, f.store, k, "fp1", "C", idem.Success); r.Response.Status != 201 {
			t.Fatalf("replay %+v", r.Response)
		}
	})

	t.Run("the fingerprint from Postgres wins", func(t *testing.T) {
		k := key(t, "k")
		mustClaim(t, f.store, k, "fp-redis", "A", idem.Created)
		if err := f.store.Repair(ctx, k, "fp-db", created201()); err != nil {
			t.Fatal(err)
		}
		mustClaim(t, f.store, k, "fp-redis", "B", idem.FingerprintMismatch)
		mustClaim(t, f.store, k, "fp-db", "B", idem.Success)
	})

	t.Run("a SUCCESS record is overwritten", func(t *testing.T) {
		k := key(t, "k")
		mustClaim(t, f.store, k, "fp1", "A", idem.Created)
		if err := f.store.Complete(ctx, k, "A", idem.Response{Status: 500, Body: []byte("stale")}); err != nil {
			t.Fatal(err)
		}
		if err := f.store.Repair(ctx, k, "fp1", created201()); err != nil {
			t.Fatal(err)
		}
		if r := mustClaim(t, f.store, k, "fp1", "B", idem.Success); r.Response.Status != 201 {
			t.Fatalf("replay %+v", r.Response)
		}
	})

	t.Run("a key of another type is corrupt", func(t *testing.T) {
		k := key(t, "k")
		if err := f.node(k).RPush(ctx, k.String(), "x").Err(); err != nil {
			t.Fatal(err)
		}
		if err := f.store.Repair(ctx, k, "fp1", created201()); !errors.Is(err, idem.ErrCorrupt) {
			t.Fatalf("err = %v, want ErrCorrupt", err)
		}
	})

	t.Run("bad arguments", func(t *testing.T) {
		k := key(t, "k")
		if err := f.store.Repair(ctx, k, "", created201()); !errors.Is(err, idem.ErrInvalidArgument) {
			t.Fatal(err)
		}
		if err := f.store.Repair(ctx, k, "fp", idem.Response{}); !errors.Is(err, idem.ErrInvalidArgument) {
			t.Fatal(err)
		}
		if err := f.store.Repair(ctx, idem.Key{}, "fp", created201()); !errors.Is(err, idem.ErrInvalidArgument) {
			t.Fatal(err)
		}
	})
}

func TestGet(t *testing.T) {
	const lease, ttl = 5 * time.Second, time.Hour
	f := newFixture(t, idem.WithLease(lease), idem.WithTTL(ttl))
	ctx := context.Background()

	k := key(t, "k")
	if _, err := f.store.Get(ctx, k); !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("err = %v, want ErrNotFound", err)
	}
	r := mustClaim(t, f.store, k, "fp1", "A", idem.Created)
	rec, err := f.store.Get(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	if rec.State != idem.StateInProgress || rec.Fingerprint != "fp1" || rec.Owner != "A" || rec.Attempts != 1 ||
		!rec.StartedAt.Equal(r.StartedAt) || !rec.LeaseUntil.Equal(r.StartedAt.Add(lease)) || rec.Response != nil ||
		rec.TTL <= ttl-time.Minute || rec.TTL > ttl || rec.Node != f.store.NodeIndex(k) ||
		rec.LeaseLeft <= lease-2*time.Second || rec.LeaseLeft > lease {
		t.Fatalf("record %+v", rec)
	}
	if err := f.store.Complete(ctx, k, "A", created201()); err != nil {
		t.Fatal(err)
	}
	rec, err = f.store.Get(ctx, k)
	if err != nil || rec.State != idem.StateSuccess || rec.Response == nil || rec.Response.Status != 201 || !rec.LeaseUntil.IsZero() || rec.LeaseLeft != 0 {
		t.Fatalf("Get after Complete = %+v, %v", rec, err)
	}

	bad := key(t, "corrupt")
	if err := f.node(bad).HSet(ctx, bad.String(), "state", "SUCCESS", "started_at", "x").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.Get(ctx, bad); !errors.Is(err, idem.ErrCorrupt) {
		t.Fatalf("err = %v, want ErrCorrupt", err)
	}
	str := key(t, "string")
	if err := f.node(str).Set(ctx, str.String(), "x", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.Get(ctx, str); !errors.Is(err, idem.ErrCorrupt) {
		t.Fatalf("err = %v, want ErrCorrupt", err)
	}
}

func TestConcurrentClaims(t *testing.T) {
	f := newFixture(t)
	k := key(t, "k")
	const n = 50
	results := make([]idem.Result, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			results[i], errs[i] = f.store.Claim(context.Background(), k, "fp1", fmt.Sprintf("owner-%d", i))
		}()
	}
	close(start)
	wg.Wait()
	created, inProgress := 0, 0
	winner := ""
	for i, r := range results {
		if errs[i] != nil {
			t.Fatalf("claim %d: %v", i, errs[i])
		}
		switch r.Outcome {
		case idem.Created:
			created++
			winner = fmt.Sprintf("owner-%d", i)
		case idem.InProgress:
			inProgress++
		default:
			t.Fatalf("claim %d: %v", i, r.Outcome)
		}
		if r.Attempts != 1 || !r.StartedAt.Equal(results[0].StartedAt) {
			t.Fatalf("claim %d: %+v", i, r)
		}
	}
	if created != 1 || inProgress != n-1 {
		t.Fatalf("%d CREATED and %d IN_PROGRESS, want 1 and %d", created, inProgress, n-1)
	}
	if h := f.hash(t, k); h["owner"] != winner {
		t.Fatalf("record owner %q, CREATED went to %q", h["owner"], winner)
	}
}

func TestNodeChoiceOnBed(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	perNode := make([]int, len(f.raw))
	for i := range 100 {
		k, _ := idem.NewKey(fmt.Sprintf("user-%d", i), request.MustKey("req"))
		r := mustClaim(t, f.store, k, "fp", "A", idem.Created)
		for j, c := range f.raw {
			n, err := c.Exists(ctx, k.String()).Result()
			if err != nil {
				t.Fatal(err)
			}
			if (n == 1) != (j == r.Node) {
				t.Fatalf("key %s: exists=%d on node %d, Claim said node %d", k, n, j, r.Node)
			}
		}
		if r.Node != f.store.NodeIndex(k) {
			t.Fatalf("Claim used node %d, NodeIndex says %d", r.Node, f.store.NodeIndex(k))
		}
		perNode[r.Node]++
	}
	for j, c := range perNode {
		if c == 0 {
			t.Fatalf("node %d got none of 100 keys: %v", j, perNode)
		}
	}
	// A second Store over the same nodes (another instance) sees the same records.
	other := newStore(t, f.raw)
	for i := range 100 {
		k, _ := idem.NewKey(fmt.Sprintf("user-%d", i), request.MustKey("req"))
		mustClaim(t, other, k, "fp", "B", idem.InProgress)
	}
}

// TestScriptsRunByEvalsha checks that the scripts run by EVALSHA, and that
// they still run after the node's script cache is flushed (EVALSHA answers
// NOSCRIPT and the Store falls back to EVAL, which loads the script again).
func TestScriptsRunByEvalsha(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	k := key(t, "k")
	c := f.node(k)
	if err := c.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	mustClaim(t, f.store, k, "fp1", "A", idem.Created)
	mustClaim(t, f.store, k, "fp1", "B", idem.InProgress)
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	mustClaim(t, f.store, k, "fp1", "B", idem.InProgress)
	mustClaim(t, f.store, k, "fp1", "B", idem.InProgress)
	if err := f.store.Complete(ctx, k, "A", created201()); err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("claim.lua")
	if err != nil {
		t.Fatal(err)
	}
	loaded, err := c.ScriptExists(ctx, redis.NewScript(string(src)).Hash()).Result()
	if err != nil || len(loaded) != 1 || !loaded[0] {
		t.Fatalf("claim.lua is not in the script cache after the flush: %v %v", loaded, err)
	}
	stats, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	// 5 script runs, each tried first by EVALSHA. Three found the script
	// missing (NOSCRIPT) and were run again by EVAL: the first claim on this
	// fresh node, the first claim after the flush, and the first complete.
	if calls := commandCalls(t, stats, "evalsha"); calls != 5 {
		t.Fatalf("EVALSHA calls = %d, want 5:\n%s", calls, stats)
	}
	if calls := commandCalls(t, stats, "eval"); calls != 3 {
		t.Fatalf("EVAL calls = %d, want 3:\n%s", calls, stats)
	}
}

// commandCalls returns the calls= count of one command in INFO commandstats.
func commandCalls(t *testing.T, info, cmd string) int {
	t.Helper()
	for _, line := range strings.Split(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":calls=")
		if !ok {
			continue
		}
		n, err := strconv.Atoi(strings.SplitN(rest, ",", 2)[0])
		if err != nil {
			t.Fatalf("bad commandstats line %q", line)
		}
		return n
	}
	return 0
}

func TestUnavailable(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	k := key(t, "k")
	n := f.bed.Redis[f.store.NodeIndex(k)]
	if err := n.Partition(ctx); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err := f.store.Claim(cctx, k, "fp1", "A")
	if !errors.Is(err, idem.ErrUnavailable) || errors.Is(err, idem.ErrCorrupt) {
		t.Fatalf("Claim during partition: err = %v, want ErrUnavailable", err)
	}
	for _, op := range []func() error{
		func() error { return f.store.Complete(cctx, k, "A", created201()) },
		func() error { return f.store.Release(cctx, k, "A") },
		func() error { return f.store.Repair(cctx, k, "fp1", created201()) },
		func() error { _, err := f.store.Get(cctx, k); return err },
	} {
		if err := op(); !errors.Is(err, idem.ErrUnavailable) {
			t.Fatalf("during partition: err = %v, want ErrUnavailable", err)
		}
	}
	if err := n.Heal(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, err := f.store.Claim(ctx, k, "fp1", "A")
		if err == nil {
			if r.Outcome != idem.Created {
				t.Fatalf("after heal: %v", r.Outcome)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after heal: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
