package testbed

import (
	"bytes"
	"strings"

	"github.com/Shopify/toxiproxy/v2/stream"
	"github.com/Shopify/toxiproxy/v2/toxics"
)

// peerFilterType is the toxiproxy toxic type of peerFilter.
const peerFilterType = "quorumlock_peerfilter"

// peerFilterMaxHead bounds what the filter buffers while it waits for the
// end of a connection's first request header; a connection whose header is
// longer passes.
const peerFilterMaxHead = 64 << 10

// The toxic is registered once, like a database/sql driver: the registry
// is toxiproxy's, and proxies create toxics from it by type name.
func init() {
	toxics.Register(peerFilterType, new(peerFilter))
}

// peerFilter is a toxic on the upstream stream of an etcd member's peer
// proxy. It reads the first HTTP request header of each connection and, when
// its X-PeerURLs header names one of From (the advertised peer URLs of
// partitioned members), drops every byte the connection sends from then on:
// the connection hangs, as in a partition. Other connections pass untouched.
//
// etcd's raft transport sets X-PeerURLs on every stream it dials and every
// message or snapshot it posts, so the filter cuts the raft traffic that a
// partitioned member starts towards the others; the partitioned member's own
// proxy cuts the traffic the others start towards it. Peer requests without
// the header (version probes, lease forwarding) are not filtered.
type peerFilter struct {
	From []string `json:"from"`
}

// peerFilterState is what the filter knows about one connection. It
// outlives an interrupted Pipe, as when another toxic joins the chain.
type peerFilterState struct {
	head    []byte
	pending []*stream.StreamChunk
	decided bool
	blocked bool
}

// NewState implements toxics.StatefulToxic.
func (f *peerFilter) NewState() any { return new(peerFilterState) }

// Pipe implements toxics.Toxic.
func (f *peerFilter) Pipe(stub *toxics.ToxicStub) {
	st, _ := stub.State.(*peerFilterState)
	if st == nil {
		st = new(peerFilterState)
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
				// Dropped on the ground.
			case st.decided:
				stub.Output <- c
			default:
				f.sniff(stub, st, c)
			}
		}
	}
}

// sniff buffers the start of the connection until its first request
// header is complete, then decides, and lets the buffered chunks through
// unless the connection is blocked.
func (f *peerFilter) sniff(stub *toxics.ToxicStub, st *peerFilterState, c *stream.StreamChunk) {
	st.head = append(st.head, c.Data...)
	st.pending = append(st.pending, c)
	end := bytes.Index(st.head, []byte("\r\n\r\n"))
	if end < 0 && len(st.head) < peerFilterMaxHead {
		return
	}
	st.decided = true
	if end >= 0 && f.blocks(st.head[:end]) {
		st.blocked = true
	} else {
		for _, p := range st.pending {
			stub.Output <- p
		}
	}
	st.head, st.pending = nil, nil
}

// blocks says whether a request header names a blocked member in
// X-PeerURLs.
func (f *peerFilter) blocks(head []byte) bool {
	for _, line := range strings.Split(string(head), "\r\n") {
		name, value, ok := strings.Cut(line, ":")
		if !ok || !strings.EqualFold(strings.TrimSpace(name), "X-PeerURLs") {
			continue
		}
		for _, u := range strings.Split(value, ",") {
			for _, from := range f.From {
				if strings.TrimSpace(u) == from {
					return true
				}
			}
		}
	}
	return false
}
