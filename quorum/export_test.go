package quorum

import (
	"context"
	"time"
)

// The Lua sources, for the tests that run each script on its own.
var (
	AcquireSource  = acquireSrc
	ReleaseSource  = releaseSrc
	ExtendSource   = extendSrc
	HandoverSource = handoverSrc
	PeekSource     = peekSrc
	PermitsSource  = permitsSrc
)

// Script names by the SHA-1 an EVALSHA of it carries.
var ScriptNames = map[string]string{
	acquireScript.bsha.(string): "acquire", extendScript.bsha.(string): "extend",
	releaseScript.bsha.(string): "release", handoverScript.bsha.(string): "handover",
	peekScript.bsha.(string): "peek", permitsScript.bsha.(string): "permits",
}

// MaxHandovers is maxHandovers.
const MaxHandovers = maxHandovers

// SubscribedBy returns how many nodes have a subscriber to key's release
// channel (PUBSUB NUMSUB): in a test with one waiting Locker, how many
// announce key's releases to it.
func (l *Locker) SubscribedBy(key string) int {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	n := 0
	for _, nd := range l.nodes {
		m, err := nd.client.PubSubNumSub(ctx, ReleaseChannelPrefix+key).Result()
		if err == nil && m[ReleaseChannelPrefix+key] > 0 {
			n++
		}
	}
	return n
}

// Waiting returns how many Lock calls of l wait for key.
func (l *Locker) Waiting(key string) int {
	l.wk.mu.Lock()
	defer l.wk.mu.Unlock()
	return len(l.wk.keys[key])
}

// Queued returns how many requests wait for node's workers (not counting
// batches that are out).
func (l *Locker) Queued(node int) int {
	n := 0
	for _, w := range l.workers[node] {
		w.mu.Lock()
		n += len(w.queue)
		w.mu.Unlock()
	}
	return n
}

// answered returns how many nodes have answered so far.
func (t tally) answered() int { return t.ok + t.held + t.failed }
