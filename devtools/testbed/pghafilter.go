package testbed

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/Shopify/toxiproxy/v2/stream"
	"github.com/Shopify/toxiproxy/v2/toxics"
)

// appFilterType is the toxiproxy toxic type of appFilter.
const appFilterType = "quorumlock_pgappfilter"

// Postgres protocol codes a connection may start with (the version of a
// startup message, and the requests that may precede one).
const (
	pgProtocol3    = 196608
	pgSSLRequest   = 80877103
	pgGSSENCReq    = 80877104
	pgStartupLimit = 10000 // longer startup messages are not parsed
)

// Registered once, like peerFilter: the registry is toxiproxy's.
func init() {
	toxics.Register(appFilterType, new(appFilter))
}

// appFilter is a toxic on the upstream stream of a data node's proxy in a
// Postgres HA group. It reads the startup message of each connection and,
// when its application_name is one of Apps, drops every byte the connection
// sends from then on: the connection hangs, as in a partition. Other
// connections pass untouched.
//
// pg_auto_failover names each standby's replication connections
// pgautofailover_standby_<node id> (streaming, pg_basebackup, pg_rewind),
// so the filter on the other nodes' proxies cuts what a partitioned node
// starts towards them; its own proxy cuts what they start towards it.
type appFilter struct {
	Apps []string `json:"apps"`
}

// appFilterState is what the filter knows about one connection.
type appFilterState struct {
	head    []byte
	decided bool
	blocked bool
}

// NewState implements toxics.StatefulToxic.
func (f *appFilter) NewState() any { return new(appFilterState) }

// Pipe implements toxics.Toxic.
func (f *appFilter) Pipe(stub *toxics.ToxicStub) {
	st, _ := stub.State.(*appFilterState)
	if st == nil {
		st = new(appFilterState)
		stub.State = st
	}
	for {
		select {
		case <-stub.Interrupt:
			return
		case c := <-stub.Input:
			if c == nil {
				stub.Close()
				return
			}
			switch {
			case st.blocked:
			case st.decided:
				stub.Output <- c
			default:
				f.sniff(stub, st, c)
			}
		}
	}
}

// sniff buffers the start of the connection until its startup message is
// complete, then decides, and lets the buffered bytes through unless the
// connection is blocked. An SSL or GSS encryption request before the
// startup message goes through at once, since the client waits for the
// server's answer before it goes on: the servers of the group refuse both,
// and the client then sends its startup message in the clear. Anything
// else (encrypted traffic, a cancel request, bytes in the middle of a
// stream) passes.
func (f *appFilter) sniff(stub *toxics.ToxicStub, st *appFilterState, c *stream.StreamChunk) {
	st.head = append(st.head, c.Data...)
	for len(st.head) >= 8 && binary.BigEndian.Uint32(st.head) == 8 {
		if code := binary.BigEndian.Uint32(st.head[4:]); code != pgSSLRequest && code != pgGSSENCReq {
			break
		}
		stub.Output <- &stream.StreamChunk{Data: slices.Clone(st.head[:8]), Timestamp: c.Timestamp}
		st.head = st.head[8:]
	}
	if len(st.head) < 8 {
		return
	}
	size := int(binary.BigEndian.Uint32(st.head))
	known := binary.BigEndian.Uint32(st.head[4:]) == pgProtocol3 && size > 8 && size <= pgStartupLimit
	if known && len(st.head) < size {
		return
	}
	st.decided = true
	if known && f.blocks(st.head[8:size]) {
		st.blocked = true
	} else {
		stub.Output <- &stream.StreamChunk{Data: st.head, Timestamp: c.Timestamp}
	}
	st.head = nil
}

// blocks says whether the parameters of a startup message (name, value,
// name, value, ..., each NUL-terminated) name a blocked application.
func (f *appFilter) blocks(params []byte) bool {
	fields := bytes.Split(params, []byte{0})
	for i := 0; i+1 < len(fields); i += 2 {
		if string(fields[i]) == "application_name" && slices.Contains(f.Apps, string(fields[i+1])) {
			return true
		}
	}
	return false
}

// frontState is the fault state a proxy of the group must have.
type frontState struct {
	// partitioned: every byte is dropped and connections hang.
	partitioned bool
	// rejected: every connection is reset as soon as its client speaks.
	rejected bool
	// apps are the blocked application names (see appFilter), sorted.
	apps []string
}

// rebuildFront stops the proxy, closing its connections, and starts a new
// one on the same addresses with the old one's latency and, in place before
// the first connection arrives, the faults of want.
func rebuildFront(p *nodeProxy, want frontState) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	old := p.proxy
	var latency *toxics.LatencyToxic
	if w := old.Toxics.GetToxic("latency"); w != nil {
		latency, _ = w.Toxic.(*toxics.LatencyToxic)
	}
	old.Stop()
	p.proxy = toxiproxy.NewProxy(p.srv, p.name, old.Listen, old.Upstream)
	var errs []error
	if latency != nil {
		errs = append(errs, p.addToxicLocked("latency", "latency", "downstream", map[string]any{"latency": latency.Latency, "jitter": latency.Jitter}))
	}
	if len(want.apps) > 0 {
		errs = append(errs, p.addToxicLocked("app-filter", appFilterType, "upstream", map[string]any{"apps": want.apps}))
	}
	if want.rejected {
		errs = append(errs, p.addToxicLocked("reject", "reset_peer", "upstream", map[string]any{"timeout": 0}))
	}
	if want.partitioned {
		errs = append(errs,
			p.addToxicLocked("partition-up", "timeout", "upstream", map[string]any{"timeout": 0}),
			p.addToxicLocked("partition-down", "timeout", "downstream", map[string]any{"timeout": 0}))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if err := p.proxy.Start(); err != nil {
		return fmt.Errorf("proxy %s: %w", p.name, err)
	}
	return nil
}
