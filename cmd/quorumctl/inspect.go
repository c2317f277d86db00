package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"
)

// keyOnNode is a key on one master as inspect reports it. The value itself
// is never printed: a lock's value is its token, which grants unlock.
type keyOnNode struct {
	Addr        string `json:"addr"`
	Reachable   bool   `json:"reachable"`
	Present     bool   `json:"present"`
	TokenDigest string `json:"token_digest,omitempty"`
	// PTTLMS is the key's remaining time to live in milliseconds: -1 when
	// it has none, -2 when the key is absent.
	PTTLMS int64  `json:"pttl_ms"`
	Error  string `json:"error,omitempty"`

	value string
}

// holder is the token a majority of the masters hold.
type holder struct {
	TokenDigest string `json:"token_digest"`
	Nodes       int    `json:"nodes"`
	// MinPTTLMS is the shortest PTTL among those nodes: the key is held by
	// a majority for at most that long, unless the holder extends it.
	MinPTTLMS int64 `json:"min_pttl_ms"`

	value string // the token itself: compared, never printed
}

// inspectReport is the output of inspect.
type inspectReport struct {
	Key      string      `json:"key"`
	Nodes    []keyOnNode `json:"nodes"`
	Majority int         `json:"majority"`
	Held     bool        `json:"held"`
	Holder   *holder     `json:"holder,omitempty"`
}

func (a *app) inspectCmd() *cobra.Command {
	var v flagVars
	const groups = withRedis
	cmd := &cobra.Command{
		Use:   "inspect KEY",
		Short: "Show KEY's value digest and PTTL on every master, and whether a majority holds one token",
		Long: `inspect reads KEY (GET and PTTL) on every master, in parallel, and says
whether a majority of them holds one token: then the lock is held. Values are
shown as a digest (the first 8 hex digits of their SHA-256), never in full.`,
		Args: keyArg,
		RunE: a.phase.RunE(func(cmd *cobra.Command, args []string) error {
			s, err := a.settings(cmd, &v, groups)
			if err != nil {
				return err
			}
			return a.inspect(cmd.Context(), s, args[0])
		}),
	}
	v.addFlags(cmd, groups)
	return cmd
}

func (a *app) inspect(ctx context.Context, s settings, key string) error {
	cs := s.clients()
	defer closeAll(cs)
	rep := inspectReport{Key: key, Nodes: make([]keyOnNode, len(cs)), Majority: majority(len(cs))}
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Go(func() { rep.Nodes[i] = readKey(ctx, c, key, s.timeout) })
	}
	wg.Wait()
	rep.Holder = majorityHolder(rep.Nodes, rep.Majority)
	rep.Held = rep.Holder != nil
	if s.json {
		return a.writeJSON(rep)
	}
	fmt.Fprintf(a.stdout, "key %q\n", key)
	tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tVALUE\tPTTL")
	for _, n := range rep.Nodes {
		switch {
		case !n.Reachable:
			fmt.Fprintf(tw, "%s\tunreachable\t-\t%s\n", n.Addr, n.Error)
		case n.Error != "":
			fmt.Fprintf(tw, "%s\terror\t%s\t%s\n", n.Addr, pttlString(n.PTTLMS), n.Error)
		case !n.Present:
			fmt.Fprintf(tw, "%s\tabsent\t-\n", n.Addr)
		default:
			fmt.Fprintf(tw, "%s\t%s\t%s\n", n.Addr, n.TokenDigest, pttlString(n.PTTLMS))
		}
	}
	_ = tw.Flush()
	if rep.Held {
		fmt.Fprintf(a.stdout, "held: token %s on %d of %d masters (%d needed), for at most %s more\n",
			rep.Holder.TokenDigest, rep.Holder.Nodes, len(rep.Nodes), rep.Majority, pttlString(rep.Holder.MinPTTLMS))
	} else {
		fmt.Fprintf(a.stdout, "not held: no token is on a majority of the %d masters (%d needed)\n", len(rep.Nodes), rep.Majority)
	}
	return nil
}

// majorityHolder returns the value that at least majority of nodes hold,
// with the shortest PTTL among them, or nil when no value has a majority.
func majorityHolder(nodes []keyOnNode, majority int) *holder {
	count := map[string]int{}
	for _, n := range nodes {
		if n.Present && n.Error == "" {
			count[n.value]++
		}
	}
	for val, c := range count {
		if c < majority {
			continue
		}
		h := &holder{TokenDigest: digest(val), Nodes: c, MinPTTLMS: -1, value: val}
		for _, n := range nodes {
			if n.value == val && n.PTTLMS >= 0 && (h.MinPTTLMS < 0 || n.PTTLMS < h.MinPTTLMS) {
				h.MinPTTLMS = n.PTTLMS
			}
		}
		return h
	}
	return nil
}

// readKey reads key's value and PTTL on one master.
func readKey(ctx context.Context, c *redis.Client, key string, timeout time.Duration) keyOnNode {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	pipe := c.Pipeline()
	r := queueKeys(ctx, pipe, []string{key})
	_, _ = pipe.Exec(ctx) // each command's error is read by results
	return r.results(c.Options().Addr)[0]
}

// keyReads are the GET and PTTL of keys queued on a pipeline.
type keyReads struct {
	gets  []*redis.StringCmd
	pttls []*redis.DurationCmd
}

// queueKeys queues a GET and a PTTL of each key on pipe.
func queueKeys(ctx context.Context, pipe redis.Pipeliner, keys []string) keyReads {
	r := keyReads{gets: make([]*redis.StringCmd, len(keys)), pttls: make([]*redis.DurationCmd, len(keys))}
	for i, k := range keys {
		r.gets[i] = pipe.Get(ctx, k)
		r.pttls[i] = pipe.PTTL(ctx, k)
	}
	return r
}

// results are the keys as the master at addr answered, once the pipeline
// ran: a key whose PTTL failed is unreachable there.
func (r keyReads) results(addr string) []keyOnNode {
	out := make([]keyOnNode, len(r.gets))
	for i := range out {
		out[i] = keyResult(addr, r.gets[i], r.pttls[i])
	}
	return out
}

// keyResult is a key on the master at addr, from its GET and PTTL.
func keyResult(addr string, get *redis.StringCmd, pttl *redis.DurationCmd) keyOnNode {
	n := keyOnNode{Addr: addr, PTTLMS: -2}
	if err := pttl.Err(); err != nil {
		n.Error = err.Error()
		return n
	}
	n.Reachable = true
	switch d := pttl.Val(); d {
	case -1, -2: // go-redis passes the negative answers through as is
		n.PTTLMS = int64(d)
	default:
		n.PTTLMS = d.Milliseconds()
	}
	val, err := get.Result()
	switch {
	case errors.Is(err, redis.Nil):
	case err != nil:
		n.Present, n.Error = n.PTTLMS != -2, err.Error()
	default:
		n.Present, n.value, n.TokenDigest = true, val, digest(val)
	}
	return n
}

// pttlString renders a PTTL in milliseconds (-1: none, -2: absent).
func pttlString(v int64) string {
	switch {
	case v == -1:
		return "no expiry"
	case v < 0:
		return "-"
	}
	return (time.Duration(v) * time.Millisecond).String()
}
