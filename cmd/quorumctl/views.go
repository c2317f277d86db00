package main

import (
	"context"
	"fmt"
	"io"
	"sync"

	"github.com/redis/go-redis/v9"
)

// keyView is one lock key over the masters: what each holds, and the token
// a majority holds, if any. Values show as digests only.
type keyView struct {
	Key    string  `json:"key"`
	Held   bool    `json:"held"`
	Holder *holder `json:"holder,omitempty"`
	// Present counts the masters where the key has a value.
	Present int         `json:"present"`
	Nodes   []keyOnNode `json:"nodes"`
}

// masterState is whether a master answered every read of a command.
type masterState struct {
	Addr      string `json:"addr"`
	Reachable bool   `json:"reachable"`
	Error     string `json:"error,omitempty"`
}

// newView is key's view from its reads on every master.
func newView(key string, nodes []keyOnNode, majority int) keyView {
	v := keyView{Key: key, Nodes: nodes, Holder: majorityHolder(nodes, majority)}
	v.Held = v.Holder != nil
	for _, n := range nodes {
		if n.Present {
			v.Present++
		}
	}
	return v
}

// readViews reads keys on every master of cs in parallel, one pipeline
// each, bounded by the timeout, and returns each key's view. A master
// whose down entry is not empty is not asked: its reads carry that error.
func readViews(ctx context.Context, s settings, cs []*redis.Client, keys []string, down []string) []keyView {
	if len(keys) == 0 {
		return nil
	}
	byNode := make([][]keyOnNode, len(cs))
	var wg sync.WaitGroup
	for i, c := range cs {
		if down != nil && down[i] != "" {
			byNode[i] = make([]keyOnNode, len(keys))
			for k := range keys {
				byNode[i][k] = keyOnNode{Addr: c.Options().Addr, PTTLMS: -2, Error: down[i]}
			}
			continue
		}
		wg.Go(func() {
			rctx, cancel := context.WithTimeout(ctx, s.timeout)
			defer cancel()
			pipe := c.Pipeline()
			r := queueKeys(rctx, pipe, keys)
			_, _ = pipe.Exec(rctx) // each command's error is read by results
			byNode[i] = r.results(c.Options().Addr)
		})
	}
	wg.Wait()
	views := make([]keyView, len(keys))
	for k, key := range keys {
		nodes := make([]keyOnNode, len(cs))
		for i := range cs {
			nodes[i] = byNode[i][k]
		}
		views[k] = newView(key, nodes, majority(len(cs)))
	}
	return views
}

// masterStates tells, for each master, whether it answered every read in
// views: a master is unreachable with the first network error it gave.
func masterStates(views ...[]keyView) []masterState {
	var out []masterState
	for _, vs := range views {
		for _, v := range vs {
			if out == nil {
				out = make([]masterState, len(v.Nodes))
				for i, n := range v.Nodes {
					out[i] = masterState{Addr: n.Addr, Reachable: true}
				}
			}
			for i, n := range v.Nodes {
				if !n.Reachable && out[i].Reachable {
					out[i].Reachable, out[i].Error = false, n.Error
				}
			}
		}
	}
	return out
}

// downErrors are the errors of the masters that did not answer, for the
// next round of reads to skip them; nil when every master answered.
func downErrors(ms []masterState) []string {
	var down []string
	for i, m := range ms {
		if !m.Reachable {
			if down == nil {
				down = make([]string, len(ms))
			}
			down[i] = m.Error
		}
	}
	return down
}

// reachableCount counts the masters of ms that answered.
func reachableCount(ms []masterState) int {
	n := 0
	for _, m := range ms {
		if m.Reachable {
			n++
		}
	}
	return n
}

// quorumRead fails when fewer than a majority of the masters answered:
// then no one can tell who holds what.
func quorumRead(what string, ms []masterState) error {
	if got, need := reachableCount(ms), majority(len(ms)); got < need {
		return fmt.Errorf("only %d of %d masters answered, a majority is %d: cannot tell who holds %s", got, len(ms), need, what)
	}
	return nil
}

// printUnreachable prints a line for each master that did not answer.
func printUnreachable(w io.Writer, ms []masterState) {
	for _, m := range ms {
		if !m.Reachable {
			fmt.Fprintf(w, "unreachable: %s: %s\n", m.Addr, m.Error)
		}
	}
}

// cells renders v in a table of masters masters as its HOLDER, MASTERS
// and MIN PTTL cells: the majority's token digest, or free, or no majority.
func (v keyView) cells(masters int) (who, where, pttl string) {
	switch {
	case v.Held:
		return v.Holder.TokenDigest, fmt.Sprintf("%d of %d", v.Holder.Nodes, masters), pttlString(v.Holder.MinPTTLMS)
	case v.Present == 0:
		return "free", "-", "-"
	}
	return "no majority", fmt.Sprintf("%d of %d hold a value", v.Present, masters), "-"
}

// nodeCell renders the key on one master: its value's digest, absent,
// or why the master did not answer.
func nodeCell(n keyOnNode) string {
	switch {
	case !n.Reachable:
		return "unreachable"
	case n.Error != "":
		return "error"
	case !n.Present:
		return "absent"
	}
	return n.TokenDigest
}
