package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/devtools/storetest"
	"github.com/quorumlock/quorumlock/devtools/testbed"
	"github.com/quorumlock/quorumlock/devtools/testbed/bedtest"
	"github.com/quorumlock/quorumlock/internal/cli"
	"github.com/quorumlock/quorumlock/quorum"
)

func TestMain(m *testing.M) {
	redis.SetLogger(cli.QuietLogger{}) // as main does
	os.Exit(m.Run())
}

// result is one quorumctl invocation.
type result struct {
	args           []string
	stdout, stderr string
	err            error
	elapsed        time.Duration
}

// all is everything the invocation printed: its output and its error.
func (r result) all() string {
	s := r.stdout + r.stderr
	if r.err != nil {
		s += "quorumctl: " + r.err.Error()
	}
	return s
}

func (r result) code() int {
	if r.err == nil {
		return 0
	}
	return cli.ExitCode(r.err)
}

// ctl runs quorumctl with args, the environment env only (not the test
// process's) and stdin.
func ctl(t *testing.T, env map[string]string, stdin string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out, errOut strings.Builder
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	start := time.Now()
	err := run(ctx, args, lookup, strings.NewReader(stdin), &out, &errOut)
	return result{args: args, stdout: out.String(), stderr: errOut.String(), err: err, elapsed: time.Since(start)}
}

// wantCode fails t unless r exited with code and its error mentions each
// of msgs.
func wantCode(t *testing.T, r result, code int, msgs ...string) {
	t.Helper()
	if got := r.code(); got != code {
		t.Fatalf("quorumctl %q: exit status %d, want %d\nstdout:\n%s\nerror: %v", r.args, got, code, r.stdout, r.err)
	}
	for _, m := range msgs {
		if r.err == nil || !strings.Contains(r.err.Error(), m) {
			t.Fatalf("quorumctl %q: error %v, want it to mention %q", r.args, r.err, m)
		}
	}
}

// Usage and input errors: a non-zero exit, a message that says what is
// wrong, and nothing printed on stdout. None needs a server.
func TestUsageErrors(t *testing.T) {
	dbFile := filepath.Join(t.TempDir(), "db")
	if err := os.WriteFile(dbFile, []byte("postgres://u:pw-in-a-file@127.0.0.1:1/db\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	redisEnv := map[string]string{"ORDERS_REDIS_ADDRS": "127.0.0.1:1"}
	for _, tc := range []struct {
		env  map[string]string
		args []string
		code int
		msg  string
	}{
		// The commands of the earlier quorumctl, in their spelling.
		{nil, nil, 2, "no command given"},
		{nil, []string{"frobnicate"}, 2, `unknown command "frobnicate"`},
		// The test bed's commands are quorumbed's.
		{nil, []string{"bed", "-redis", "x"}, 2, "bed moved to quorumbed, a separate command that links the test bed: go run ./devtools/cmd/quorumbed bed -redis x"},
		{nil, []string{"demo", "-ordersd", "bin/ordersd"}, 2, "go run ./devtools/cmd/quorumbed demo -ordersd bin/ordersd"},
		{nil, []string{"trust"}, 2, "--addrs names no node"},
		{nil, []string{"trust", "-addrs", " , "}, 2, "--addrs names no node"},
		// No key, bad durations, bad address lists, bad output formats.
		{redisEnv, []string{"inspect"}, 2, "missing KEY"},
		{redisEnv, []string{"inspect", ""}, 2, "KEY is empty"},
		{redisEnv, []string{"inspect", "a", "b"}, 2, "want one KEY, got 2"},
		{redisEnv, []string{"lock"}, 2, "missing KEY"},
		{nil, []string{"fence"}, 2, "missing KEY"},
		{redisEnv, []string{"unlock", "k"}, 2, "missing --token"},
		{redisEnv, []string{"unlock", "k", "--token", "-"}, 2, "--token -: read the token from standard input"},
		{redisEnv, []string{"unlock", quorum.BootMarkerKey, "--token", "x"}, 2, "is the restart marker"},
		{redisEnv, []string{"lock", quorum.BootMarkerKey}, 2, "is the restart marker"},
		{redisEnv, []string{"lock", "k", "--ttl", "soon"}, 2, `invalid argument "soon" for "--ttl"`},
		{redisEnv, []string{"lock", "k", "--ttl", "0s"}, 2, "--ttl must be positive"},
		{redisEnv, []string{"lock", "k", "--hold", "-1s"}, 2, "--hold must not be negative"},
		{redisEnv, []string{"lock", "k", "--ttl", "1ms"}, 2, "TTL must be at least 10ms"},
		{redisEnv, []string{"status", "--timeout", "0s"}, 2, "--timeout must be positive"},
		{map[string]string{"ORDERS_REDIS_ADDRS": "127.0.0.1:1", "ORDERS_LOCK_TTL": "five"}, []string{"status"}, 2, `ORDERS_LOCK_TTL="five"`},
		{map[string]string{"ORDERS_REDIS_ADDRS": "127.0.0.1:1", "ORDERS_REDIS_DURABLE": "maybe"}, []string{"status"}, 2, `ORDERS_REDIS_DURABLE="maybe": want true or false`},
		{nil, []string{"status"}, 2, "no Redis masters: set ORDERS_REDIS_ADDRS or --redis"},
		{nil, []string{"status", "--redis", " , "}, 2, "no Redis masters"},
		{nil, []string{"status", "--redis", "localhost"}, 2, `ORDERS_REDIS_ADDRS entry "localhost"`},
		{nil, []string{"status", "--redis", "127.0.0.1:1,127.0.0.1:1"}, 2, "names 127.0.0.1:1 twice"},
		{nil, []string{"inspect", "k", "--redis", "127.0.0.1:http"}, 2, `port "http" is not a number`},
		{map[string]string{"ORDERS_REDIS_ADDRS": "10.0.0.1"}, []string{"status"}, 2, "missing port in address"},
		{redisEnv, []string{"status", "-o", "yaml"}, 2, `-o "yaml": want table or json`},
		{redisEnv, []string{"status", "-redis-durable=maybe"}, 2, `invalid argument "maybe" for "--redis-durable"`},
		{redisEnv, []string{"status", "--redis-tls-ca-file", "/nonexistent/ca.pem"}, 2, "ORDERS_REDIS_TLS_CA_FILE"},
		// The database: missing, both ways at once, unparsable, unreachable.
		{nil, []string{"fence", "k"}, 2, "no database: set ORDERS_DATABASE_URL"},
		{nil, []string{"invariants"}, 2, "no database"},
		{map[string]string{"ORDERS_DATABASE_URL": "postgres://u:pw@h/db", "ORDERS_DATABASE_URL_FILE": dbFile}, []string{"fence", "k"}, 2, "ORDERS_DATABASE_URL and ORDERS_DATABASE_URL_FILE are both set"},
		{map[string]string{"ORDERS_DATABASE_URL_FILE": "/nonexistent/db"}, []string{"fence", "k"}, 2, "ORDERS_DATABASE_URL_FILE"},
		{nil, []string{"fence", "k", "--database-url", "postgres://u:pw-on-the-line@127.0.0.1:99999/db"}, 2, "database URL"},
		{map[string]string{"ORDERS_DATABASE_URL_FILE": dbFile}, []string{"fence", "k"}, 1, "database postgres://u:xxxxx@127.0.0.1:1/db is unreachable"},
		{nil, []string{"invariants", "--database-url", "postgres://u:pw-on-the-line@127.0.0.1:1/db"}, 1, "is unreachable"},
		{redisEnv, []string{"lock", "k", "--database-url", "postgres://u:pw-on-the-line@127.0.0.1:1/db"}, 1, "is unreachable"},
		// Unreachable masters.
		{redisEnv, []string{"status"}, 1, "unhealthy: only 0 of 1 masters may vote"},
		{redisEnv, []string{"unlock", "k", "--token", "some-token"}, 1, "nothing released: 1 master(s) did not answer"},
		{redisEnv, []string{"lock", "k"}, 1, "not locked"},
	} {
		r := ctl(t, tc.env, "", tc.args...)
		wantCode(t, r, tc.code, tc.msg)
		if tc.code == 2 && r.stdout != "" {
			t.Errorf("quorumctl %q printed on stdout: %q", tc.args, r.stdout)
		}
		if out := r.all(); strings.Contains(out, "pw-in-a-file") || strings.Contains(out, "pw-on-the-line") {
			t.Errorf("quorumctl %q printed the database password: %s", tc.args, out)
		}
	}
}

func TestNormalizeArgs(t *testing.T) {
	root := (&app{}).rootCmd()
	for _, tc := range []struct{ in, want []string }{
		{[]string{"trust", "-addrs", "a:1,b:2"}, []string{"trust", "--addrs", "a:1,b:2"}},
		{[]string{"inspect", "k", "-o", "json"}, []string{"inspect", "k", "-o", "json"}},
		{[]string{"inspect", "k", "-ojson"}, []string{"inspect", "k", "-ojson"}},
		{[]string{"lock", "k", "-ttl", "1s", "-hold", "0s"}, []string{"lock", "k", "--ttl", "1s", "--hold", "0s"}},
		{[]string{"unlock", "k", "--token", "-hold"}, []string{"unlock", "k", "--token", "-hold"}}, // a value is never rewritten
		{[]string{"unlock", "k", "--", "-token"}, []string{"unlock", "k", "--", "-token"}},
		{[]string{"status", "-nosuchflag"}, []string{"status", "-nosuchflag"}},
	} {
		if got := cli.Normalize(root, tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("Normalize(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestInfoValue(t *testing.T) {
	info := "# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\n"
	if v := infoValue(info, "redis_version"); v != "7.0.15" {
		t.Fatalf("got %q", v)
	}
	if v := infoValue(info, "missing"); v != "" {
		t.Fatalf("got %q", v)
	}
}

// guardOf decides as quorum/scripts/acquire.lua does.
func TestGuardOf(t *testing.T) {
	const w = 10 * time.Second
	for _, tc := range []struct {
		name                    string
		up                      int64
		runID, marker           string
		hasMarker, aof, durable bool
		votes                   bool
		state                   string
		wait                    time.Duration
	}{
		{"past the window", 11, "r1", "", false, false, false, true, guardPastWindow, 0},
		{"exactly the window is not enough", 10, "r1", "", false, false, false, false, guardWarming, time.Second},
		{"young, no marker", 3, "r1", "", false, false, false, false, guardWarming, 8 * time.Second},
		{"young, trusted", 3, "r1", "r1", true, false, false, true, guardTrusted, 0},
		{"young, trusted by an earlier process", 3, "r2", "r1", true, false, false, false, guardWarming, 8 * time.Second},
		{"durable, marker survived, AOF on", 3, "r2", "r1", true, true, true, true, guardDurable, 0},
		{"durable, marker survived, AOF off", 3, "r2", "r1", true, false, true, false, guardWarming, 8 * time.Second},
		{"durable, came back empty", 3, "r2", "", false, true, true, false, guardWarming, 8 * time.Second},
		{"aof on but not declared durable", 3, "r2", "r1", true, true, false, false, guardWarming, 8 * time.Second},
		{"no run_id", 3, "", "", false, false, false, false, guardUnknown, 0},
	} {
		g := guardOf(tc.up, tc.runID, tc.marker, tc.hasMarker, tc.aof, tc.durable, w)
		if g.votes != tc.votes || g.state != tc.state || g.wait != tc.wait || g.detail == "" {
			t.Errorf("%s: got %+v, want votes=%v state=%s wait=%v", tc.name, g, tc.votes, tc.state, tc.wait)
		}
	}
}

func TestRedactDSN(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://u:s3cret@h:5432/db?sslmode=disable": "postgres://u:xxxxx@h:5432/db?sslmode=disable",
		"postgres://u@h/db?password=s3cret":             "postgres://u@h/db?password=xxxxx",
		"host=h user=u password=s3cret dbname=db":       "host=h user=u password=xxxxx dbname=db",
		"host=h password='s3 cret' dbname=db":           "host=h password=xxxxx dbname=db",
		"postgres://u:s3c#ret@h/db":                     "(a database URL that does not parse; not shown)",
	} {
		if got := redactDSN(in); got != want {
			t.Errorf("redactDSN(%q) = %q, want %q", in, got, want)
		}
	}
	a := &app{}
	a.addDatabaseSecrets("postgres://u:p%40ss@h/db")
	if got := a.scrub("password p@ss, escaped p%40ss"); strings.Contains(got, "p@ss") || strings.Contains(got, "p%40ss") {
		t.Errorf("scrub left the password: %q", got)
	}
}

func TestDigest(t *testing.T) {
	// sha256("abc") = ba7816bf...
	if got := digest("abc"); got != "ba7816bf" {
		t.Fatalf("digest(abc) = %q", got)
	}
}

// The commands against a bed of five masters and Postgres: real output,
// real keys on the nodes, real rows.
func TestCommandsOnBed(t *testing.T) {
	bed := bedtest.Start(t, testbed.Options{Redis: 5, Postgres: true})
	ctx := context.Background()
	db := storetest.New(t, bed.Postgres)

	// A role of its own, with a password that appears nowhere else, so that
	// any output that contains it leaked it.
	password := "pw-" + randHex(t)
	role := "ctl_" + randHex(t)
	if _, err := db.Pool.Exec(ctx, "CREATE ROLE "+role+" LOGIN PASSWORD '"+password+"'"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, "GRANT "+testbed.PostgresUser+" TO "+role); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = db.Pool.Exec(context.Background(), "DROP ROLE IF EXISTS "+role) })
	u, err := url.Parse(db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(role, password)
	env := map[string]string{
		"ORDERS_REDIS_ADDRS":  strings.Join(bed.RedisAddrs(), ","),
		"ORDERS_DATABASE_URL": u.String(),
		"ORDERS_LOCK_TTL":     "1h", // the nodes vote only through the trust marker
	}
	admins := make([]*redis.Client, len(bed.Redis))
	for i, n := range bed.Redis {
		admins[i] = n.Admin()
		t.Cleanup(func() { _ = admins[i].Close() })
	}
	values := func(key string) []string {
		var out []string
		for _, a := range admins {
			v, err := a.Get(ctx, key).Result()
			if errors.Is(err, redis.Nil) {
				v = "<absent>"
			} else if err != nil {
				t.Fatal(err)
			}
			out = append(out, v)
		}
		return out
	}
	var outputs []result // everything printed, for the secrets check
	var tokenOutputs []result
	var tokens []string // every token a lease had, shown or not
	do := func(stdin string, args ...string) result {
		t.Helper()
		r := ctl(t, env, stdin, args...)
		outputs = append(outputs, r)
		return r
	}
	fast := func(r result) {
		t.Helper()
		if r.elapsed >= time.Second {
			t.Errorf("quorumctl %q took %v, want well under a second", r.args, r.elapsed)
		}
	}

	// trust, in the earlier spelling: each marker holds its node's run_id,
	// and a lock whose window is far above the nodes' uptime is granted.
	r := do("", "trust", "-addrs", strings.Join(bed.RedisAddrs(), ","))
	wantCode(t, r, 0)
	if got := strings.Count(r.stdout, "trusted until its next restart"); got != 5 {
		t.Fatalf("trust output %q", r.stdout)
	}
	for i, a := range admins {
		id := infoValue(a.Info(ctx, "server").Val(), "run_id")
		if marker := a.Get(ctx, quorum.BootMarkerKey).Val(); id == "" || marker != id {
			t.Fatalf("%s: marker %q, run_id %q", bed.Redis[i].Name(), marker, id)
		}
	}
	l, err := quorum.New(clientsOf(t, bed), quorum.WithTTL(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	lease, err := l.TryLock(ctx, "trusted")
	if err != nil {
		t.Fatalf("the vouched nodes did not vote: %v", err)
	}
	_ = lease.Unlock(ctx)
	_ = l.Close()
	wantCode(t, do("", "trust", "-addrs", "127.0.0.1:1"), 1, "127.0.0.1:1")

	t.Run("status", func(t *testing.T) {
		r := do("", "status")
		wantCode(t, r, 0)
		fast(r)
		for i, a := range admins {
			version := infoValue(a.Info(ctx, "server").Val(), "redis_version")
			row := regexp.MustCompile(regexp.QuoteMeta(bed.RedisAddrs()[i]) + `\s+yes\s+[0-9.]+ms\s+` + regexp.QuoteMeta(version) + `\s+\S+\s+yes\s+trusted`)
			if !row.MatchString(r.stdout) {
				t.Errorf("no reachable, trusted row for %s with version %s in\n%s", bed.RedisAddrs()[i], version, r.stdout)
			}
		}
		for _, want := range []string{"quorum: 5 of 5 reachable, 5 may vote, 3 needed: the lock can be taken", "restart window 1h0m0s", "database: postgres://" + role + ":xxxxx@", "reachable", "PostgreSQL"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("status output lacks %q:\n%s", want, r.stdout)
			}
		}
		var rep statusReport
		r = do("", "status", "-o", "json")
		wantCode(t, r, 0)
		if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
			t.Fatalf("%v: %s", err, r.stdout)
		}
		if len(rep.Nodes) != 5 || rep.Reachable != 5 || rep.Voters != 5 || !rep.Lockable || !rep.Database.Reachable || strings.Contains(rep.Database.URL, password) {
			t.Fatalf("status JSON %+v", rep)
		}
		for _, n := range rep.Nodes {
			if !n.Reachable || n.Version == "" || !n.Votes || n.Guard != guardTrusted || n.LatencyMS <= 0 {
				t.Errorf("node %+v", n)
			}
		}

		// Three nodes lose their marker: they wait out the window, and the
		// lock can no longer be taken.
		for _, a := range admins[:3] {
			a.Del(ctx, quorum.BootMarkerKey)
		}
		r = do("", "status", "-o", "json")
		wantCode(t, r, 1, "only 2 of 5 masters may vote, a majority is 3")
		rep = statusReport{}
		if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
			t.Fatalf("%v: %s", err, r.stdout)
		}
		for i, n := range rep.Nodes {
			if want := i >= 3; n.Votes != want || (!want && (n.Guard != guardWarming || n.WaitMS <= 0)) {
				t.Errorf("after the markers of nodes 0-2 were deleted, node %d: %+v", i, n)
			}
		}
		// With a short window the young nodes vote again; then trust them
		// back for the tests below.
		// (A node counts up to 1s less than its uptime: wait until each
		// reports 2s.)
		for deadline := time.Now().Add(5 * time.Second); ; {
			r = do("", "status", "--lock-ttl", "1ms")
			if r.code() == 0 && strings.Count(r.stdout, "up longer than the 1ms window") == 5 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("status --lock-ttl 1ms: %v\n%s", r.err, r.stdout)
			}
			time.Sleep(100 * time.Millisecond)
		}
		wantCode(t, do("", "trust", "--addrs", strings.Join(bed.RedisAddrs(), ",")), 0)

		// A node that does not answer.
		r = do("", "status", "--redis", bed.RedisAddrs()[0]+",127.0.0.1:1,127.0.0.1:2")
		wantCode(t, r, 1, "only 1 of 3 masters may vote")
		fast(r)
		if !regexp.MustCompile(`127\.0\.0\.1:1\s+no\s+-`).MatchString(r.stdout) || !strings.Contains(r.stdout, "connection refused") {
			t.Errorf("status with a dead node:\n%s", r.stdout)
		}
	})

	const key = "orders:stock:42"
	var token string
	t.Run("lock, inspect, fence", func(t *testing.T) {
		r := do("", "lock", key, "--ttl", "1m", "--hold", "0")
		wantCode(t, r, 0)
		fast(r)
		tokenOutputs = append(tokenOutputs, r)
		m := regexp.MustCompile(`(?m)^token: +(\S+)$`).FindStringSubmatch(r.stdout)
		if m == nil {
			t.Fatalf("lock --hold 0 printed no token line:\n%s", r.stdout)
		}
		token = m[1]
		tokens = append(tokens, token)
		if strings.Count(r.stdout, token) != 1 {
			t.Fatalf("lock --hold 0 printed the token more than once:\n%s", r.stdout)
		}
		for _, want := range []string{"digest:   " + digest(token), "fence:    1\n", "validity: ", "kept:     until its TTL (1m0s) runs out"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("lock output lacks %q:\n%s", want, r.stdout)
			}
		}
		if got := values(key); slices.ContainsFunc(got, func(v string) bool { return v != token }) {
			t.Fatalf("after lock --hold 0 the nodes hold %q, want the token everywhere", got)
		}

		r = do("", "inspect", key)
		wantCode(t, r, 0)
		fast(r)
		if got := strings.Count(r.stdout, digest(token)); got != 6 { // 5 rows and the verdict
			t.Errorf("inspect shows the digest %d times, want 6:\n%s", got, r.stdout)
		}
		if !strings.Contains(r.stdout, "held: token "+digest(token)+" on 5 of 5 masters (3 needed)") {
			t.Errorf("inspect:\n%s", r.stdout)
		}
		var rep inspectReport
		r = do("", "inspect", key, "-o", "json")
		wantCode(t, r, 0)
		if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
			t.Fatalf("%v: %s", err, r.stdout)
		}
		if !rep.Held || rep.Holder == nil || rep.Holder.TokenDigest != digest(token) || rep.Holder.Nodes != 5 || rep.Holder.MinPTTLMS <= 0 || rep.Holder.MinPTTLMS > 60000 {
			t.Fatalf("inspect JSON %+v", rep)
		}
		for _, n := range rep.Nodes {
			if !n.Present || n.TokenDigest != digest(token) || n.PTTLMS <= 0 {
				t.Errorf("node %+v", n)
			}
		}

		// A majority with one token is held even when the others differ.
		admins[0].Set(ctx, key, "someone-else", time.Minute)
		admins[1].Del(ctx, key)
		r = do("", "inspect", key)
		if !strings.Contains(r.stdout, "held: token "+digest(token)+" on 3 of 5 masters") || !strings.Contains(r.stdout, digest("someone-else")) || !strings.Contains(r.stdout, "absent") {
			t.Errorf("inspect with a split:\n%s", r.stdout)
		}
		admins[0].Set(ctx, key, token, time.Minute)
		admins[1].Set(ctx, key, token, time.Minute)

		r = do("", "fence", key)
		wantCode(t, r, 0)
		fast(r)
		if r.stdout != `key "orders:stock:42": fence 1`+"\n" {
			t.Errorf("fence: %q", r.stdout)
		}
		var fr fenceReport
		r = do("", "fence", key, "-o", "json")
		if err := json.Unmarshal([]byte(r.stdout), &fr); err != nil || !fr.Present || fr.Fence != 1 {
			t.Errorf("fence JSON %q (%v)", r.stdout, err)
		}
		r = do("", "fence", "never-locked")
		wantCode(t, r, 0)
		if !strings.Contains(r.stdout, "fence none") {
			t.Errorf("fence of a new key: %q", r.stdout)
		}
		r = do("", "fence", "never-locked", "-o", "json")
		if err := json.Unmarshal([]byte(r.stdout), &fr); err != nil || fr.Present || fr.Fence != 0 {
			t.Errorf("fence JSON of a new key %q (%v)", r.stdout, err)
		}

		// Held: a second lock is refused, and takes nothing.
		r = do("", "lock", key)
		wantCode(t, r, 1, "not locked", "held by another owner")
		if got := values(key); slices.ContainsFunc(got, func(v string) bool { return v != token }) {
			t.Fatalf("a refused lock changed the key: %q", got)
		}
	})

	t.Run("unlock", func(t *testing.T) {
		if token == "" {
			t.Skip("no lock taken")
		}
		r := do("", "unlock", key, "--token", "not-the-token")
		wantCode(t, r, 1, "nothing released: no master holds this token")
		fast(r)
		if got := strings.Count(r.stdout, "not owner: held by another token"); got != 5 {
			t.Errorf("unlock with a wrong token:\n%s", r.stdout)
		}
		if !strings.Contains(r.stdout, "released on 0 of 5 masters") {
			t.Errorf("unlock with a wrong token:\n%s", r.stdout)
		}
		if got := values(key); slices.ContainsFunc(got, func(v string) bool { return v != token }) {
			t.Fatalf("a wrong token freed something: %q", got)
		}

		r = do("", "unlock", key, "--token", token)
		wantCode(t, r, 0)
		fast(r)
		if got := strings.Count(r.stdout, "released\n"); got != 5 || !strings.Contains(r.stdout, "released on 5 of 5 masters") {
			t.Errorf("unlock:\n%s", r.stdout)
		}
		if got := values(key); slices.ContainsFunc(got, func(v string) bool { return v != "<absent>" }) {
			t.Fatalf("after unlock the nodes hold %q", got)
		}
		r = do("", "inspect", key)
		if strings.Count(r.stdout, "absent") != 5 || !strings.Contains(r.stdout, "not held") {
			t.Errorf("inspect after unlock:\n%s", r.stdout)
		}
		r = do("", "unlock", key, "--token", token, "-o", "json")
		wantCode(t, r, 1, "nothing released")
		var ur unlockReport
		if err := json.Unmarshal([]byte(r.stdout), &ur); err != nil || ur.Released != 0 || len(ur.Nodes) != 5 || ur.Nodes[0].Result != unlockAbsent {
			t.Errorf("unlock JSON %q (%v)", r.stdout, err)
		}

		// lock -o json --hold 0, then unlock with the token on stdin.
		r = do("", "lock", key, "-o", "json", "--ttl", "30s")
		wantCode(t, r, 0)
		tokenOutputs = append(tokenOutputs, r)
		var lr lockReport
		if err := json.Unmarshal([]byte(r.stdout), &lr); err != nil || lr.Token == "" || lr.TokenDigest != digest(lr.Token) || lr.Fence != 2 || !lr.Kept {
			t.Fatalf("lock JSON %q (%v)", r.stdout, err)
		}
		tokens = append(tokens, lr.Token)
		r = do(lr.Token+"\n", "unlock", key, "--token", "-")
		wantCode(t, r, 0)
		if !strings.Contains(r.stdout, "released on 5 of 5 masters") {
			t.Errorf("unlock --token -:\n%s", r.stdout)
		}
	})

	t.Run("lock --hold", func(t *testing.T) {
		// The lease outlives its TTL: the watchdog extends it.
		done := make(chan result, 1)
		go func() { done <- ctl(t, env, "", "lock", key, "--ttl", "600ms", "--hold", "1500ms") }()
		var held string
		for deadline := time.Now().Add(5 * time.Second); held == "" && time.Now().Before(deadline); {
			if v, err := admins[4].Get(ctx, key).Result(); err == nil {
				held = v
			}
			time.Sleep(5 * time.Millisecond)
		}
		r := <-done
		outputs = append(outputs, r)
		wantCode(t, r, 0)
		if held == "" {
			t.Fatal("the key never appeared on the nodes")
		}
		tokens = append(tokens, held)
		for _, want := range []string{"digest:   " + digest(held), "fence:    3", "holding:  1.5s", "released: on 5 of 5 masters"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("lock --hold output lacks %q:\n%s", want, r.stdout)
			}
		}
		if r.elapsed < 1500*time.Millisecond {
			t.Errorf("lock --hold 1500ms returned after %v", r.elapsed)
		}
		if got := values(key); slices.ContainsFunc(got, func(v string) bool { return v != "<absent>" }) {
			t.Fatalf("after lock --hold the nodes hold %q", got)
		}
		r = do("", "lock", key, "--hold", "10ms", "-o", "json")
		wantCode(t, r, 0)
		var lr lockReport
		if err := json.Unmarshal([]byte(r.stdout), &lr); err != nil || lr.Token != "" || lr.Kept || lr.Released == nil || *lr.Released != 5 || lr.Fence != 4 {
			t.Fatalf("lock --hold JSON %q (%v)", r.stdout, err)
		}
		// Without a database there is no fence.
		noDB := map[string]string{"ORDERS_REDIS_ADDRS": env["ORDERS_REDIS_ADDRS"]}
		r = ctl(t, noDB, "", "lock", key, "--hold", "1ms")
		outputs = append(outputs, r)
		wantCode(t, r, 0)
		if !strings.Contains(r.stdout, "fence:    none (no database configured)") {
			t.Errorf("lock without a database:\n%s", r.stdout)
		}
	})

	t.Run("invariants", func(t *testing.T) {
		if err := db.Store.SeedProduct(ctx, "p-1", 5, 100); err != nil {
			t.Fatal(err)
		}
		r := do("", "invariants")
		wantCode(t, r, 0)
		fast(r)
		if r.stdout != "invariants: none broken\n" {
			t.Errorf("invariants on a healthy database: %q", r.stdout)
		}
		r = do("", "invariants", "-o", "json")
		var ir invariantsReport
		if err := json.Unmarshal([]byte(r.stdout), &ir); err != nil || !ir.OK || len(ir.Violations) != 0 {
			t.Errorf("invariants JSON %q (%v)", r.stdout, err)
		}

		if _, err := db.Pool.Exec(ctx, "ALTER TABLE product_stock DROP CONSTRAINT product_stock_available_check"); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Pool.Exec(ctx, "UPDATE product_stock SET available = -1 WHERE product_id = 'p-1'"); err != nil {
			t.Fatal(err)
		}
		r = do("", "invariants")
		wantCode(t, r, 1, "invariant violation(s)")
		fast(r)
		for _, want := range []string{"VIOLATION non_negative_stock: product_id=p-1 available=-1", "VIOLATION stock_balance: product_id=p-1"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("invariants on a broken database lack %q:\n%s", want, r.stdout)
			}
		}
		r = do("", "invariants", "-o", "json")
		wantCode(t, r, 1)
		ir = invariantsReport{}
		if err := json.Unmarshal([]byte(r.stdout), &ir); err != nil || ir.OK || len(ir.Violations) == 0 || ir.Violations[0].Invariant != "non_negative_stock" {
			t.Errorf("invariants JSON on a broken database %q (%v)", r.stdout, err)
		}
	})

	t.Run("database errors name no password", func(t *testing.T) {
		bad := *u
		bad.User = url.UserPassword(role, password+"-wrong")
		r := do("", "fence", key, "--database-url", bad.String())
		wantCode(t, r, 1, "is unreachable", "password authentication failed")
		r = do("", "status", "--database-url", bad.String())
		wantCode(t, r, 1, "the database does not answer")
		if !strings.Contains(r.stdout, "database: postgres://"+role+":xxxxx@") || !strings.Contains(r.stdout, "unreachable") {
			t.Errorf("status with a wrong password:\n%s", r.stdout)
		}
		file := filepath.Join(t.TempDir(), "url")
		if err := os.WriteFile(file, []byte(u.String()+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		fileEnv := map[string]string{"ORDERS_DATABASE_URL_FILE": file}
		r = ctl(t, fileEnv, "", "fence", key)
		outputs = append(outputs, r)
		wantCode(t, r, 0)
	})

	// No output holds the database password, and no output holds a token
	// but the one line of lock --hold 0 that hands it over.
	if len(tokens) < 3 {
		t.Fatalf("only %d tokens seen", len(tokens))
	}
	for _, r := range outputs {
		if strings.Contains(r.all(), password) {
			t.Errorf("quorumctl %q printed the database password:\n%s", r.args, r.all())
		}
		shown := slices.ContainsFunc(tokenOutputs, func(o result) bool { return slices.Equal(o.args, r.args) && o.stdout == r.stdout })
		for _, tok := range tokens {
			n := strings.Count(r.all(), tok)
			switch {
			case shown && strings.Contains(r.stdout, tok) && n != 1:
				t.Errorf("quorumctl %q printed a token %d times", r.args, n)
			case !shown && n > 0:
				t.Errorf("quorumctl %q printed a full token:\n%s", r.args, r.all())
			}
		}
	}
}

// The operator's binary, meant to be copied to production hosts, links
// neither the testing package nor the test bed nor testcontainers-go and
// its Docker client. (Its tests may: go list -deps without -test leaves
// them out.) A failure shows the chain of imports that brings each one in.
func TestNoTestDependencies(t *testing.T) {
	gocmd, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to list quorumctl's dependencies: %v", err)
	}
	const self = "github.com/quorumlock/quorumlock/cmd/quorumctl"
	cmd := exec.Command(gocmd, "list", "-deps", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}", self)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v\n%s", self, err, stderr.String())
	}
	imports := map[string][]string{} // every dependency, and what it imports
	for line := range strings.Lines(string(out)) {
		if f := strings.Fields(line); len(f) > 0 {
			imports[f[0]] = f[1:]
		}
	}
	if _, ok := imports["github.com/spf13/cobra"]; !ok {
		t.Fatalf("go list -deps %s listed no cobra, so not quorumctl's dependencies:\n%s", self, out)
	}
	// chain is the shortest chain of imports from quorumctl to a package
	// that is root or under it, or nil.
	chain := func(root string) []string {
		prev := map[string]string{self: ""}
		queue := []string{self}
		for len(queue) > 0 {
			p := queue[0]
			queue = queue[1:]
			if p == root || strings.HasPrefix(p, root+"/") {
				var c []string
				for ; p != ""; p = prev[p] {
					c = append(c, p)
				}
				slices.Reverse(c)
				return c
			}
			for _, q := range imports[p] {
				if _, seen := prev[q]; !seen {
					prev[q] = p
					queue = append(queue, q)
				}
			}
		}
		return nil
	}
	for _, root := range []string{
		"testing",
		"github.com/testcontainers/testcontainers-go",
		"github.com/quorumlock/quorumlock/devtools/testbed",
		"github.com/moby/moby/client", // the Docker client testcontainers-go brings
	} {
		if c := chain(root); c != nil {
			t.Errorf("cmd/quorumctl links %s, which an operator's binary must not:\n  %s", c[len(c)-1], strings.Join(c, "\n  imports "))
		}
	}
}

func randHex(t *testing.T) string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b[:])
}

func clientsOf(t *testing.T, bed *testbed.Bed) []redis.UniversalClient {
	var out []redis.UniversalClient
	for _, a := range bed.RedisAddrs() {
		c := redis.NewClient(testbed.ClientOptions(a))
		t.Cleanup(func() { _ = c.Close() })
		out = append(out, c)
	}
	return out
}
