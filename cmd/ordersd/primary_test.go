package main

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/quorumlock/quorumlock/devtools/testbed"
	"github.com/quorumlock/quorumlock/devtools/testbed/bedtest"
	"github.com/quorumlock/quorumlock/orders"
)

// TestDBDefaults: several hosts get target_session_attrs=read-write and a
// connect timeout unless the string names them; one host only the
// timeout; a string that cannot be parsed is refused without being shown.
func TestDBDefaults(t *testing.T) {
	cases := []struct{ in, want string }{
		{"postgres://u:pw@h1:5432/db", "postgres://u:pw@h1:5432/db?connect_timeout=1"},
		{"postgres://u:pw@h1:5432,h2:5433/db?sslmode=disable", "postgres://u:pw@h1:5432,h2:5433/db?sslmode=disable&target_session_attrs=read-write&connect_timeout=1"},
		{"postgres://u:pw@h1,h2/db?target_session_attrs=read-write&connect_timeout=5", "postgres://u:pw@h1,h2/db?target_session_attrs=read-write&connect_timeout=5"},
		{"host=h1,h2 port=5432,5433 user=u dbname=db", "host=h1,h2 port=5432,5433 user=u dbname=db target_session_attrs=read-write connect_timeout=1"},
	}
	for _, c := range cases {
		got, err := withDBDefaults(c.in)
		if err != nil || got != c.want {
			t.Errorf("withDBDefaults(%q) = %q, %v; want %q", c.in, got, err, c.want)
			continue
		}
		cfg, err := pgconn.ParseConfig(got)
		if err != nil || cfg.ConnectTimeout == 0 || (len(hostsOf(cfg)) > 1) != (cfg.ValidateConnect != nil) {
			t.Errorf("%q parses to timeout %v, validate %v (%v)", got, cfg.ConnectTimeout, cfg.ValidateConnect != nil, err)
		}
	}
	if _, err := withDBDefaults("postgres://u:s3cret@h1:notaport/db"); err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("a bad URL: %v", err)
	}
}

// TestHostIndex: the address a connection reached is matched to its host
// by address or by name.
func TestHostIndex(t *testing.T) {
	hosts := []string{"10.0.0.1:5432", "localhost:5433", "127.0.0.1:5434"}
	for _, c := range []struct {
		remote string
		want   int
	}{{"10.0.0.1:5432", 0}, {"127.0.0.1:5433", 1}, {"127.0.0.1:5434", 2}, {"10.0.0.9:5432", -1}} {
		addr, _ := net.ResolveTCPAddr("tcp", c.remote)
		if got := hostIndex(context.Background(), hosts, addr); got != c.want {
			t.Errorf("hostIndex(%s) = %d, want %d", c.remote, got, c.want)
		}
	}
	if s := (primary{host: 1, hosts: 3}).String(); s != "host 2 of 3 in ORDERS_DATABASE_URL" {
		t.Errorf("primary: %q", s)
	}
}

// TestReadyStandby: a standby reached is not ready, said without a
// driver's error; the primary's line appears only with several hosts.
func TestReadyStandby(t *testing.T) {
	h := health{masters: 3, up: 3, pgErr: errReadOnly}
	if status, body := h.verdict(true, orders.FallbackDB); status != http.StatusServiceUnavailable || body != "not ready: Postgres answers as a standby only (no primary);" {
		t.Fatalf("standby: %d %q", status, body)
	}
	if l := (health{primary: primary{hosts: 1}}).primaryLine(); l != "" {
		t.Fatalf("one host: %q", l)
	}
	if l := (health{primary: primary{host: 1, hosts: 2}}).primaryLine(); l != "postgres primary: host 2 of 2 in ORDERS_DATABASE_URL\n" {
		t.Fatalf("two hosts: %q", l)
	}
}

// TestSeveralHosts: ordersd started on a URL whose first host does not
// answer connects to the second, and /readyz names it, by its place.
func TestSeveralHosts(t *testing.T) {
	bed := bedtest.Start(t, testbed.Options{Redis: 1, Postgres: true})
	dsn := bedtest.NewDatabase(t, bed.Postgres)
	dead, err := net.Listen("tcp", "127.0.0.1:0") // accepts, never answers
	if err != nil {
		t.Fatal(err)
	}
	defer dead.Close()
	real := bed.Postgres.Addr()
	t.Setenv("ORDERS_DATABASE_URL", strings.Replace(dsn, real, dead.Addr().String()+","+real, 1))
	t.Setenv("ORDERS_REDIS_ADDRS", strings.Join(bed.RedisAddrs(), ","))
	t.Setenv("ORDERS_JWT_SECRET", "0123456789abcdef0123456789abcdef")
	t.Setenv("ORDERS_LISTEN", "127.0.0.1:0")
	t.Setenv("ORDERS_PAYMENT_URL", "http://127.0.0.1:9")
	t.Setenv("ORDERS_LOCK", "off")
	base, stop := startServe(t)
	defer func() { _ = stop() }()
	code, body := get(t, base, "/readyz")
	if code != http.StatusOK || !strings.HasSuffix(body, "\npostgres primary: host 2 of 2 in ORDERS_DATABASE_URL\n") {
		t.Fatalf("/readyz: %d %q", code, body)
	}
	if strings.Contains(body, dead.Addr().String()) {
		t.Fatalf("/readyz names an address: %q", body)
	}
}
