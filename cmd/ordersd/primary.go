package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// dbConnectTimeout bounds one connection attempt to one host of
// ORDERS_DATABASE_URL when the URL names no connect_timeout: a host that
// accepts TCP but does not answer (a paused primary) must not hold up the
// next one.
const dbConnectTimeout = time.Second

// errReadOnly is the probe's answer when the server reached is a standby.
var errReadOnly = errors.New("the server reached is in recovery (a standby): it takes no writes")

// withDBDefaults returns the database URL (or keyword/value string) with
// what a group of several hosts needs when the string does not say it
// already: target_session_attrs=read-write, so that a connection finds
// the primary whichever host comes first, and a connect timeout, so that
// a host that does not answer is passed over. A single host gets only the
// timeout. The string is otherwise unchanged (its password included).
func withDBDefaults(dsn string) (string, error) {
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return "", fmt.Errorf("ORDERS_DATABASE_URL: %w", errors.New("cannot be parsed (its text is not shown: it may hold a password)"))
	}
	var add []string
	if len(hostsOf(cfg)) > 1 && cfg.ValidateConnect == nil {
		add = append(add, "target_session_attrs=read-write")
	}
	if cfg.ConnectTimeout == 0 {
		add = append(add, "connect_timeout="+strconv.Itoa(int(dbConnectTimeout/time.Second)))
	}
	if len(add) == 0 {
		return dsn, nil
	}
	if !strings.HasPrefix(dsn, "postgres://") && !strings.HasPrefix(dsn, "postgresql://") {
		return dsn + " " + strings.Join(add, " "), nil
	}
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	return dsn + sep + strings.Join(add, "&"), nil
}

// hostsOf lists the distinct host:port pairs of cfg in the order pgx tries
// them (a host appears once even when it is tried with and without TLS).
func hostsOf(cfg *pgconn.Config) []string {
	seen := map[string]bool{}
	var out []string
	add := func(host string, port uint16) {
		hp := net.JoinHostPort(host, strconv.Itoa(int(port)))
		if !seen[hp] {
			seen[hp] = true
			out = append(out, hp)
		}
	}
	add(cfg.Host, cfg.Port)
	for _, f := range cfg.Fallbacks {
		add(f.Host, f.Port)
	}
	return out
}

// primary is what the probe found: the host of the URL the pool reaches
// (0-based; -1 when it is not one of them by address) and how many there
// are.
type primary struct {
	host, hosts int
}

// String names the primary by its place in ORDERS_DATABASE_URL, not by its
// address.
func (p primary) String() string {
	if p.host < 0 {
		return fmt.Sprintf("a host not matched among the %d of ORDERS_DATABASE_URL", p.hosts)
	}
	return fmt.Sprintf("host %d of %d in ORDERS_DATABASE_URL", p.host+1, p.hosts)
}

// probePrimary asks the server the pool reaches whether it takes writes,
// and finds which host of the URL it is.
func probePrimary(ctx context.Context, pool *pgxpool.Pool) (primary, error) {
	c, err := pool.Acquire(ctx)
	if err != nil {
		return primary{}, err
	}
	defer c.Release()
	var standby bool
	if err := c.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&standby); err != nil {
		return primary{}, err
	}
	if standby {
		return primary{}, errReadOnly
	}
	hosts := hostsOf(&pool.Config().ConnConfig.Config)
	return primary{host: hostIndex(ctx, hosts, c.Conn().PgConn().Conn().RemoteAddr()), hosts: len(hosts)}, nil
}

// hostIndex finds remote among hosts: by address, or by resolving each
// host's name (within ctx); -1 when none matches.
func hostIndex(ctx context.Context, hosts []string, remote net.Addr) int {
	rhost, rport, err := net.SplitHostPort(remote.String())
	if err != nil {
		return -1
	}
	for i, hp := range hosts {
		host, port, _ := net.SplitHostPort(hp)
		if port != rport {
			continue
		}
		if host == rhost {
			return i
		}
		ips, err := net.DefaultResolver.LookupHost(ctx, host)
		for _, ip := range ips {
			if err == nil && net.ParseIP(ip).Equal(net.ParseIP(rhost)) {
				return i
			}
		}
	}
	return -1
}

// primaryWatch drops the pool's connections when they no longer reach a
// primary: every interval it probes within timeout, and when the probe
// fails (a node paused or cut off, a standby reached) it resets the pool,
// so that new connections look for the primary again (with
// target_session_attrs=read-write) instead of each request in turn
// finding its connection dead. It logs each change of primary.
type primaryWatch struct {
	pool           *pgxpool.Pool
	every, timeout time.Duration
	log            *slog.Logger
	// lost, when set, is called with the reset: the pool's preferred host
	// is forgotten (hostPreference.forget).
	lost func()
}

// run probes every interval until ctx ends.
func (w primaryWatch) run(ctx context.Context) error {
	t := time.NewTicker(w.every)
	defer t.Stop()
	last := primary{host: -2}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, w.timeout)
		p, err := probePrimary(pctx, w.pool)
		cancel()
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			w.log.Warn("postgres: no primary reached; dropping the pool's connections", "err", err)
			w.pool.Reset()
			if w.lost != nil {
				w.lost()
			}
			last = primary{host: -2}
		case p != last:
			w.log.Info("postgres: primary reached", "primary", p.String())
			last = p
		}
	}
}
