package idem_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/orders/idem"
	"github.com/quorumlock/quorumlock/orders/request"
)

func TestNewKey(t *testing.T) {
	for _, tc := range []struct {
		user, key, want string
	}{
		{"u1001", "req-001", "idem:orders:u1001:req-001"},
		{"a:b", "c", "idem:orders:a%3Ab:c"},
		{"a", "b:c", "idem:orders:a:b:c"},
		{"100%", "k", "idem:orders:100%25:k"},
		{"%3A", "k", "idem:orders:%253A:k"},
		{":", ":", "idem:orders:%3A::"},
	} {
		k, err := idem.NewKey(tc.user, request.MustKey(tc.key))
		if err != nil {
			t.Fatalf("NewKey(%q, %q): %v", tc.user, tc.key, err)
		}
		if k.String() != tc.want || k.User() != tc.user || k.Value() != tc.key {
			t.Errorf("NewKey(%q, %q) = %q (%q, %q), want %q", tc.user, tc.key, k.String(), k.User(), k.Value(), tc.want)
		}
	}
	for _, tc := range []struct {
		user string
		key  request.Key
	}{
		{"", request.MustKey("k")}, {"u", request.Key{}}, {strings.Repeat("u", request.MaxUserIDLen+1), request.MustKey("k")},
	} {
		if _, err := idem.NewKey(tc.user, tc.key); !errors.Is(err, idem.ErrInvalidArgument) {
			t.Errorf("NewKey(%d bytes, %q) err = %v, want ErrInvalidArgument", len(tc.user), tc.key, err)
		}
	}
	if _, err := idem.NewKey(strings.Repeat("u", request.MaxUserIDLen), request.MustKey("k")); err != nil {
		t.Errorf("a user id of the longest length the token verifier accepts: %v", err)
	}
}

// splitKey inverts NewKey: it recovers (user, key) from a Redis key. It is
// written independently of the package, from the documented format.
func splitKey(s string) (user, key string, err error) {
	rest, ok := strings.CutPrefix(s, idem.KeyPrefix)
	if !ok {
		return "", "", fmt.Errorf("no prefix in %q", s)
	}
	esc, key, ok := strings.Cut(rest, ":")
	if !ok {
		return "", "", fmt.Errorf("no separator in %q", s)
	}
	var b strings.Builder
	for i := 0; i < len(esc); i++ {
		if esc[i] != '%' {
			b.WriteByte(esc[i])
			continue
		}
		switch {
		case strings.HasPrefix(esc[i:], "%25"):
			b.WriteByte('%')
		case strings.HasPrefix(esc[i:], "%3A"):
			b.WriteByte(':')
		default:
			return "", "", fmt.Errorf("bad escape in %q", s)
		}
		i += 2
	}
	return b.String(), key, nil
}

// FuzzKey checks that the Redis key determines the (user, key) pair: it can
// be split back into exactly the pair it was built from, so two distinct
// pairs never map to the same Redis key.
func FuzzKey(f *testing.F) {
	f.Add("u1001", "req-001", "u1001", "req-002")
	f.Add("a:b", "c", "a", "b:c")
	f.Add("a%3Ab", "c", "a:b", "c")
	f.Add("%", "%", "%25", "%")
	f.Add(":", "::", "::", ":")
	f.Fuzz(func(t *testing.T, u1, k1, u2, k2 string) {
		rk1, errA := request.ParseKey(k1)
		rk2, errB := request.ParseKey(k2)
		if errA != nil || errB != nil {
			return
		}
		a, errA := idem.NewKey(u1, rk1)
		b, errB := idem.NewKey(u2, rk2)
		if errA != nil || errB != nil {
			return
		}
		for _, k := range []idem.Key{a, b} {
			u, v, err := splitKey(k.String())
			if err != nil || u != k.User() || v != k.Value() {
				t.Fatalf("Redis key %q splits to (%q, %q, %v), want (%q, %q)", k.String(), u, v, err, k.User(), k.Value())
			}
		}
		if (u1 != u2 || k1 != k2) && a.String() == b.String() {
			t.Fatalf("(%q, %q) and (%q, %q) share Redis key %q", u1, k1, u2, k2, a.String())
		}
	})
}

// unusedNodes returns n clients that are never contacted: New does not dial,
// and NodeIndex is pure.
func unusedNodes(n int) []redis.UniversalClient {
	cs := make([]redis.UniversalClient, n)
	for i := range cs {
		cs[i] = redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", 1+i)})
	}
	return cs
}

func closeAll(cs []redis.UniversalClient) {
	for _, c := range cs {
		_ = c.Close()
	}
}

func TestNodeIndexStableAndSpread(t *testing.T) {
	nodes := unusedNodes(6)
	defer closeAll(nodes)
	five, err := idem.New(nodes[:5])
	if err != nil {
		t.Fatal(err)
	}
	fiveAgain, _ := idem.New(nodes[:5], idem.WithTTL(idem.DefaultTTL*2))
	six, _ := idem.New(nodes)
	one, _ := idem.New(nodes[:1])

	const keys = 10000
	counts := make([]int, 5)
	moved := 0
	for i := range keys {
		k, err := idem.NewKey(fmt.Sprintf("u%d", i%97), request.MustKey(fmt.Sprintf("req-%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		n := five.NodeIndex(k)
		if n < 0 || n >= 5 {
			t.Fatalf("NodeIndex = %d, out of range", n)
		}
		if five.NodeIndex(k) != n || fiveAgain.NodeIndex(k) != n {
			t.Fatalf("NodeIndex of %s is not stable", k)
		}
		if one.NodeIndex(k) != 0 {
			t.Fatalf("single node store chose %d", one.NodeIndex(k))
		}
		counts[n]++
		if m := six.NodeIndex(k); m != n {
			moved++
			if m != 5 {
				t.Fatalf("adding a sixth node moved %s from node %d to node %d, not to the new node", k, n, m)
			}
		}
	}
	for i, c := range counts {
		// Expect 2000 each; allow a wide margin (the hash is fixed, so this
		// never flakes: it fails only if the hash changes badly).
		if c < keys/5*8/10 || c > keys/5*12/10 {
			t.Errorf("node %d holds %d of %d keys: counts %v", i, c, keys, counts)
		}
	}
	if moved < keys/6*8/10 || moved > keys/6*12/10 {
		t.Errorf("adding a sixth node moved %d of %d keys, want about %d", moved, keys, keys/6)
	}
}

// TestNodeIndexPinned pins the node choice: every instance of every version
// must agree on it, so a change of the hash must be deliberate.
func TestNodeIndexPinned(t *testing.T) {
	nodes := unusedNodes(5)
	defer closeAll(nodes)
	s, _ := idem.New(nodes)
	got := ""
	for _, pair := range [][2]string{{"u1001", "req-001"}, {"u1001", "req-002"}, {"u1002", "req-001"}, {"a:b", "c"}, {"a", "b:c"}} {
		k, _ := idem.NewKey(pair[0], request.MustKey(pair[1]))
		got += fmt.Sprint(s.NodeIndex(k))
	}
	const want = "03432"
	if got != want {
		t.Fatalf("node choice = %s, want %s", got, want)
	}
}

func TestNew(t *testing.T) {
	nodes := unusedNodes(2)
	defer closeAll(nodes)
	bad := []struct {
		name  string
		nodes []redis.UniversalClient
		opts  []idem.Option
	}{
		{"no nodes", nil, nil},
		{"nil node", []redis.UniversalClient{nodes[0], nil}, nil},
		{"zero ttl", nodes, []idem.Option{idem.WithTTL(0)}},
		{"sub-ms ttl", nodes, []idem.Option{idem.WithTTL(1500 * 1000)}},
		{"negative lease", nodes, []idem.Option{idem.WithLease(-1)}},
		{"lease not shorter than ttl", nodes, []idem.Option{idem.WithTTL(idem.DefaultLease)}},
	}
	for _, tc := range bad {
		if _, err := idem.New(tc.nodes, tc.opts...); !errors.Is(err, idem.ErrInvalidArgument) {
			t.Errorf("%s: err = %v, want ErrInvalidArgument", tc.name, err)
		}
	}
	s, err := idem.New(nodes)
	if err != nil {
		t.Fatal(err)
	}
	if s.TTL() != idem.DefaultTTL || s.Lease() != idem.DefaultLease {
		t.Fatalf("defaults: ttl %v lease %v", s.TTL(), s.Lease())
	}
}

func TestNewRefusesNilOption(t *testing.T) {
	nodes := unusedNodes(1)
	defer closeAll(nodes)
	_, err := idem.New(nodes, idem.WithTTL(time.Hour), nil)
	if !errors.Is(err, idem.ErrInvalidArgument) || !strings.Contains(err.Error(), "option 1 is nil") {
		t.Fatalf("err = %v, want ErrInvalidArgument naming option 1", err)
	}
}

func TestOutcomeString(t *testing.T) {
	for o, want := range map[idem.Outcome]string{
		idem.Created: "CREATED", idem.InProgress: "IN_PROGRESS", idem.Success: "SUCCESS",
		idem.FingerprintMismatch: "FINGERPRINT_MISMATCH", idem.Takeover: "TAKEOVER", 0: "Outcome(0)",
	} {
		if o.String() != want {
			t.Errorf("%d.String() = %q, want %q", int(o), o.String(), want)
		}
	}
}

func TestNewOwner(t *testing.T) {
	a, b := idem.NewOwner(), idem.NewOwner()
	if a == b || len(a) < 22 {
		t.Fatalf("NewOwner gave %q and %q", a, b)
	}
}
