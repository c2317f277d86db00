package testbed

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/Shopify/toxiproxy/v2/toxics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// nodeProxy is the embedded toxiproxy listener in front of one node.
type nodeProxy struct {
	mu    sync.Mutex
	name  string
	srv   *toxiproxy.ApiServer
	proxy *toxiproxy.Proxy
	// blocked are the etcd peer URLs whose connections the proxy drops
	// (see setBlocked); only etcd peer proxies have any.
	blocked []string
}

func newNodeProxy(name, upstream string) (*nodeProxy, error) {
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	p := &nodeProxy{name: name, srv: srv}
	px, err := p.start("127.0.0.1:0", upstream)
	if err != nil {
		return nil, err
	}
	p.proxy = px
	return p, nil
}

// start starts a new toxiproxy listener on listen in front of upstream.
func (p *nodeProxy) start(listen, upstream string) (*toxiproxy.Proxy, error) {
	px := toxiproxy.NewProxy(p.srv, p.name, listen, upstream)
	if err := px.Start(); err != nil {
		return nil, fmt.Errorf("proxy %s: %w", p.name, err)
	}
	return px, nil
}

func (p *nodeProxy) addr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.proxy.Listen
}

// setUpstream points the proxy at a new backend address, keeping its own
// listen address, and drops the connections to the old backend.
func (p *nodeProxy) setUpstream(upstream string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.proxy.Upstream == upstream {
		return nil
	}
	return p.proxy.Update(&toxiproxy.Proxy{Listen: p.proxy.Listen, Upstream: upstream, Enabled: true})
}

func (p *nodeProxy) addToxic(name, typ, stream string, attrs any) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.addToxicLocked(name, typ, stream, attrs)
}

func (p *nodeProxy) addToxicLocked(name, typ, stream string, attrs any) error {
	body, err := json.Marshal(map[string]any{
		"name": name, "type": typ, "stream": stream, "toxicity": 1.0, "attributes": attrs,
	})
	if err != nil {
		return err
	}
	if _, err := p.proxy.Toxics.AddToxicJson(bytes.NewReader(body)); err != nil {
		return fmt.Errorf("add toxic %s: %w", name, err)
	}
	return nil
}

func (p *nodeProxy) removeToxic(ctx context.Context, name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	_ = p.proxy.Toxics.RemoveToxic(ctx, name)
}

// partition drops every byte in both directions, on open and new
// connections alike, without closing them: clients see timeouts, as in a
// real partition, not refused connections.
func (p *nodeProxy) partition() error {
	if err := p.addToxic("partition-up", "timeout", "upstream", map[string]any{"timeout": 0}); err != nil {
		return err
	}
	return p.addToxic("partition-down", "timeout", "downstream", map[string]any{"timeout": 0})
}

// heal ends a partition. The connections that lived through it are closed,
// as after a real partition long enough for clients to give up on them.
//
// It does not remove the timeout toxics from the running proxy: toxiproxy's
// RemoveToxic closes a timeout toxic's stub (its Cleanup) and returns
// without linking the stub before it to the link's output, so the next
// chunk a client sends on such a connection strands that stub's goroutine
// forever (toxics.(*NoopToxic).Pipe in chan send). Instead the partitioned
// proxy is stopped, which closes every connection while the toxics still
// drain them, so each link ends on its own; and a new proxy without toxics
// takes over the same listen address (see rebuildLocked).
func (p *nodeProxy) heal(context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.partitionedLocked() {
		return nil
	}
	if err := p.rebuildLocked(false); err != nil {
		return fmt.Errorf("heal: %w", err)
	}
	return nil
}

func (p *nodeProxy) partitionedLocked() bool {
	return p.proxy.Toxics.GetToxic("partition-up") != nil || p.proxy.Toxics.GetToxic("partition-down") != nil
}

// setBlocked makes the proxy drop the connections whose first request
// comes from one of the etcd peer URLs in from (see peerFilter); nil
// blocks none. The proxy is rebuilt, so every connection starts anew and is
// judged from its first byte.
func (p *nodeProxy) setBlocked(from []string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if slices.Equal(from, p.blocked) {
		return nil
	}
	p.blocked = slices.Clone(from)
	if err := p.rebuildLocked(p.partitionedLocked()); err != nil {
		return fmt.Errorf("block peers: %w", err)
	}
	return nil
}

// rebuildLocked stops the proxy, closing its connections, and starts a new
// one on the same listen address and upstream with the old one's latency,
// the peer filter, and, when partitioned, the partition toxics, all in place
// before the first connection arrives.
func (p *nodeProxy) rebuildLocked(partitioned bool) error {
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
	if len(p.blocked) > 0 {
		errs = append(errs, p.addToxicLocked("peer-filter", peerFilterType, "upstream", map[string]any{"from": p.blocked}))
	}
	if partitioned {
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

// latency delays every reply by d (0 removes the delay).
func (p *nodeProxy) latency(ctx context.Context, d time.Duration) error {
	p.removeToxic(ctx, "latency")
	if d <= 0 {
		return nil
	}
	return p.addToxic("latency", "latency", "downstream", map[string]any{"latency": d.Milliseconds()})
}

func (p *nodeProxy) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.proxy.Stop()
}
