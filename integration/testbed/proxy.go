package testbed

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// nodeProxy is the embedded toxiproxy listener in front of one node.
type nodeProxy struct {
	mu    sync.Mutex
	proxy *toxiproxy.Proxy
}

func newNodeProxy(name, upstream string) (*nodeProxy, error) {
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	p := toxiproxy.NewProxy(srv, name, "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		return nil, fmt.Errorf("proxy %s: %w", name, err)
	}
	return &nodeProxy{proxy: p}, nil
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

func (p *nodeProxy) heal(ctx context.Context) {
	p.removeToxic(ctx, "partition-up")
	p.removeToxic(ctx, "partition-down")
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
