package quorum

import (
	"context"
	_ "embed" // the Lua scripts
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/lease"
)

var (
	//go:embed scripts/acquire.lua
	acquireSrc string
	//go:embed scripts/release.lua
	releaseSrc string
	//go:embed scripts/extend.lua
	extendSrc string
	//go:embed scripts/handover.lua
	handoverSrc string
	//go:embed scripts/peek.lua
	peekSrc string
	//go:embed scripts/permits.lua
	permitsSrc string

	acquireScript  = newLuaScript(acquireSrc)
	extendScript   = newLuaScript(extendSrc)
	releaseScript  = newLuaScript(releaseSrc)
	handoverScript = newLuaScript(handoverSrc)
	peekScript     = newLuaScript(peekSrc)
	permitsScript  = newLuaScript(permitsSrc)
	// allScripts are the scripts a node is loaded with (see nodeWorker.load).
	allScripts = [...]*luaScript{acquireScript, extendScript, releaseScript, handoverScript, peekScript, permitsScript}
)

// The Locker implements the primitives beyond the mutex too.
var _ lease.Primitives = (*Locker)(nil)

// BootMarkerKey is the key of the restart marker on every node: the run_id
// of the process TrustNode vouched for or (WithDurableNodes) that first voted
// once past the window. It must never be given a TTL or be evicted.
const BootMarkerKey = "quorumlock:boot"

// TrustNode tells the restart guard that node c has not forgotten any lock
// key it acknowledged (it is new, or an operator checked its data), so it may
// vote before its uptime reaches the restart window, until it restarts (the
// trust is tied to its run_id). Never use it to skip an unplanned restart's wait.
func TrustNode(ctx context.Context, c redis.Cmdable) error {
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return fmt.Errorf("quorum: trust node: %w", err)
	}
	id := infoField(info, "run_id")
	if id == "" {
		return fmt.Errorf("quorum: trust node: INFO server has no run_id")
	}
	if err := c.Set(ctx, BootMarkerKey, id, 0).Err(); err != nil {
		return fmt.Errorf("quorum: trust node: %w", err)
	}
	return nil
}

// infoField returns the value of field in an INFO reply, or "".
func infoField(info, field string) string {
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}

var _ lease.Locker = (*Locker)(nil)

// Locker acquires leases on keys by majority vote over independent Redis
// masters (Redlock). It is safe for concurrent use. Close it when done: it runs
// the nodes' workers and, once a Lock has waited, a Pub/Sub connection per node.
type Locker struct {
	nodes       []node
	quorum      int
	cfg         config
	wk          *waker
	workers     []*nodeLanes   // per node
	stop        chan struct{}  // closed by Close once every request has ended
	workersDone sync.WaitGroup // the workers' goroutines

	ttlArg, windowArg, durableArg any // boxed once

	mu        sync.RWMutex   // orders a new request against Close
	closed    atomic.Bool    // set under mu
	inflight  sync.WaitGroup // node requests not yet answered, which Close waits for
	closeOnce sync.Once
	closeErr  error
}

type node struct {
	client redis.UniversalClient
	addr   string
	own    *redis.Client // a client New opened (see New), closed by Close
}

// New returns a Locker over nodes, which must be independent Redis masters
// (not replicas, not the same server twice). Use an odd number: 2f+1 nodes
// keep working with f nodes down. New reports every problem it finds.
//
// Every node request must end at the node timeout and must not be retried
// behind the Locker's back (a retried release cannot tell "deleted by my
// first try" from "never mine"). A *redis.Client whose options ensure both
// (ContextTimeoutEnabled, MaxRetries -1, no negative Read/WriteTimeout), and
// any other UniversalClient, is used as given. For other *redis.Clients New
// opens its own client with those settings corrected, which Close closes
// (hooks on the given client do not see the Locker's requests).
func New(nodes []redis.UniversalClient, opts ...Option) (*Locker, error) {
	if len(nodes) == 0 {
		return nil, errors.New("quorum: New: no nodes given")
	}
	cfg := defaultConfig()
	var p problems
	for i, o := range opts {
		if o == nil {
			p.bad("option %d is nil", i)
		} else if err := o(&cfg); err != nil {
			p = append(p, err)
		}
	}
	l := &Locker{nodes: make([]node, len(nodes)), quorum: majority(len(nodes)), stop: make(chan struct{})}
	l.checkNodes(nodes, cfg.guard, &p)
	cfg.resolve(&p)
	if len(p) > 0 {
		return nil, fmt.Errorf("quorum: New: %w", errors.Join(p...))
	}
	l.cfg = cfg
	l.wk = &waker{l: l, keys: map[string][]*waiter{}, held: map[string]int{}, subscribed: map[string]bool{}}
	l.ttlArg, l.windowArg, l.durableArg = cfg.ttl.Milliseconds(), cfg.window.Milliseconds(), "0"
	if cfg.durable {
		l.durableArg = "1"
	}
	for i, n := range l.nodes {
		if c, ok := n.client.(*redis.Client); ok && needsOwn(c.Options()) {
			own := ownClient(c)
			l.nodes[i].client, l.nodes[i].own = own, own
		}
		l.workers = append(l.workers, newNodeLanes(l, i))
	}
	return l, nil
}

// checkNodes records the nodes in l and what is wrong with them in p.
func (l *Locker) checkNodes(nodes []redis.UniversalClient, guard bool, p *problems) {
	for i, c := range nodes {
		if isNilClient(c) {
			p.bad("nodes[%d] is nil", i)
			continue
		}
		addr := addrOf(c)
		for j := range i {
			switch {
			case nodes[j] == c:
				p.bad("nodes[%d] is the same client as nodes[%d]: each node must be a distinct master", i, j)
			case addr != "" && l.nodes[j].addr == addr:
				p.bad("nodes[%d] and nodes[%d] both address %s: each node must be a distinct master", i, j, addr)
			}
		}
		if guard {
			switch c.(type) {
			case *redis.ClusterClient, *redis.Ring:
				p.bad("nodes[%d] is a %T: with the restart guard each node must be one master (a *redis.Client)", i, c)
			}
		}
		if rc, ok := c.(*redis.Client); ok && rc.Options().Addr == failoverAddr && needsOwn(rc.Options()) {
			// A copy would not follow the failovers the original tracks.
			p.bad("nodes[%d] is a Sentinel failover client that lets a request outlive its deadline or retries it: set ContextTimeoutEnabled: true and MaxRetries: -1 (and no negative Read/WriteTimeout) in its FailoverOptions", i)
		}
		l.nodes[i] = node{client: c, addr: addr}
	}
}

// needsOwn reports whether options o (processed by NewClient: MaxRetries 0 is
// none, timeout -1 no deadline) let a request outlive its deadline or retry it.
func needsOwn(o *redis.Options) bool {
	return !o.ContextTimeoutEnabled || o.MaxRetries != 0 || o.ReadTimeout < 0 || o.WriteTimeout < 0
}

// ownClient opens a client to c's node that neither retries nor outlives ctx.
func ownClient(c *redis.Client) *redis.Client {
	cp := *c.Options()
	cp.ContextTimeoutEnabled = true
	cp.MaxRetries = -1
	// Processed 0 means "no timeout", -1 "no deadline at all"; unprocessed
	// -1 means "no timeout" and lets the context's deadline apply.
	if cp.ReadTimeout <= 0 {
		cp.ReadTimeout = -1
	}
	if cp.WriteTimeout <= 0 {
		cp.WriteTimeout = -1
	}
	// State that belongs to the given client alone.
	cp.ClientSideCache, cp.ClientSideCacheConfig, cp.PushNotificationProcessor = nil, nil, nil
	return redis.NewClient(&cp)
}

// Close waits for every node request sent, background releases included
// (each ends within about two node timeouts), and closes the clients New
// opened. Lock, TryLock and Do fail with lease.ErrClosed afterwards, and Extend
// and Unlock reach no node. Close is idempotent and safe for concurrent use.
func (l *Locker) Close() error {
	l.mu.Lock()
	l.closed.Store(true)
	l.mu.Unlock()
	l.inflight.Wait()
	l.closeOnce.Do(func() {
		close(l.stop)
		l.workersDone.Wait()
		l.wk.close()
		var errs []error
		for _, n := range l.nodes {
			if n.own != nil {
				errs = append(errs, n.own.Close())
			}
		}
		l.closeErr = errors.Join(errs...)
	})
	return l.closeErr
}

// enter counts n node requests about to be sent, unless the Locker closed.
func (l *Locker) enter(n int) bool {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if !l.closed.Load() {
		l.inflight.Add(n)
	}
	return !l.closed.Load()
}

// isNilClient reports whether c is nil, or a nil go-redis client.
func isNilClient(c redis.UniversalClient) bool {
	return c == nil || c == (*redis.Client)(nil) || c == (*redis.ClusterClient)(nil) || c == (*redis.Ring)(nil)
}

// failoverAddr is the address go-redis reports for every Sentinel failover
// client: it names no master, so it cannot tell two masters apart.
const failoverAddr = "FailoverClient"

func addrOf(c redis.UniversalClient) string {
	if c, ok := c.(*redis.Client); ok && c.Options().Addr != failoverAddr {
		return c.Options().Addr
	}
	return ""
}

// TTL returns the lease TTL of the Locker.
func (l *Locker) TTL() time.Duration { return l.cfg.ttl }
