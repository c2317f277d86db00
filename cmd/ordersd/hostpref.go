package main

import (
	"context"
	"net"
	"strconv"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// hostPreference has each new connection of the pool try first the host
// of the URL where the last one found a primary. pgx tries the hosts in
// the URL's order; after a failover the old primary may come first, and
// when it hangs (paused, or cut off) every new connection spends its
// connect timeout on it before it reaches the new one. It is the pool's
// BeforeConnect and AfterConnect; the primary watch has it forget the
// host when the pool no longer reaches a primary (a preferred host that
// hangs would cost each new connection the same timeout).
type hostPreference struct {
	mu   sync.Mutex
	last string // host:port of the URL, as hostsOf names it; "" none yet
}

// beforeConnect moves the preferred host, with each of its TLS variants,
// to the front of cc's hosts, keeping the others in order.
func (h *hostPreference) beforeConnect(_ context.Context, cc *pgx.ConnConfig) error {
	h.mu.Lock()
	last := h.last
	h.mu.Unlock()
	if last == "" || len(cc.Fallbacks) == 0 {
		return nil
	}
	all := append([]*pgconn.FallbackConfig{{Host: cc.Host, Port: cc.Port, TLSConfig: cc.TLSConfig}}, cc.Fallbacks...)
	var first, rest []*pgconn.FallbackConfig
	for _, f := range all {
		if net.JoinHostPort(f.Host, strconv.Itoa(int(f.Port))) == last {
			first = append(first, f)
		} else {
			rest = append(rest, f)
		}
	}
	if len(first) == 0 {
		return nil
	}
	order := append(first, rest...)
	cc.Host, cc.Port, cc.TLSConfig, cc.Fallbacks = order[0].Host, order[0].Port, order[0].TLSConfig, order[1:]
	return nil
}

// afterConnect remembers which host of the URL the new connection
// reached: with target_session_attrs=read-write, the primary.
func (h *hostPreference) afterConnect(ctx context.Context, c *pgx.Conn) error {
	hosts := hostsOf(&c.Config().Config)
	if i := hostIndex(ctx, hosts, c.PgConn().Conn().RemoteAddr()); i >= 0 {
		h.mu.Lock()
		h.last = hosts[i]
		h.mu.Unlock()
	}
	return nil
}

// forget drops the preference: new connections try the hosts in the URL's
// order until one finds a primary again.
func (h *hostPreference) forget() {
	h.mu.Lock()
	h.last = ""
	h.mu.Unlock()
}
