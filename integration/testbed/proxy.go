package testbed

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
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
// takes over the same listen address.
func (p *nodeProxy) heal(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.proxy.Toxics.GetToxic("partition-up") == nil && p.proxy.Toxics.GetToxic("partition-down") == nil {
		return nil
	}
	old := p.proxy
	var latency *toxics.ToxicWrapper
	if w := old.Toxics.GetToxic("latency"); w != nil {
		latency = w
	}
	old.Stop()
	px, err := p.start(old.Listen, old.Upstream)
	if err != nil {
		return fmt.Errorf("heal: %w", err)
	}
	p.proxy = px
	if latency != nil {
		if lt, ok := latency.Toxic.(*toxics.LatencyToxic); ok {
			return p.addToxicLocked("latency", "latency", "downstream", map[string]any{"latency": lt.Latency, "jitter": lt.Jitter})
		}
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
