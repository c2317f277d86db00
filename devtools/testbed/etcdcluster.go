package testbed

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
)

// startEtcdCluster creates the proxies of opts.Etcd members, starts the
// members at once and waits until every one serves clients. closeAll stops
// whatever was started, also when err is set.
func startEtcdCluster(ctx context.Context, p provider, opts Options, shim string) (members []*EtcdNode, closeAll func(context.Context) error, err error) {
	peers := &etcdPeers{cut: make([]bool, opts.Etcd)}
	closeAll = func(ctx context.Context) error {
		var errs []error
		for _, n := range peers.members {
			errs = append(errs, n.close(ctx))
		}
		return errors.Join(errs...)
	}
	token := make([]byte, 8)
	if _, err := rand.Read(token); err != nil {
		return nil, closeAll, err
	}
	var cluster []string
	for i := range opts.Etcd {
		n, err := newEtcdNode(i, peers)
		if err != nil {
			return nil, closeAll, err
		}
		peers.members = append(peers.members, n)
		cluster = append(cluster, n.Name()+"="+n.PeerURL())
	}
	cl := etcdCluster{members: strings.Join(cluster, ","), token: "quorumlock-bed-" + hex.EncodeToString(token)}
	for _, n := range peers.members {
		if err := n.configure(p, opts, cl, shim); err != nil {
			return nil, closeAll, err
		}
	}
	if err := startAll(ctx, opts, peers.members); err != nil {
		return nil, closeAll, err
	}
	return peers.members, closeAll, nil
}

// startAll starts every member at once (the first members wait for the
// others to form a quorum), then waits until each serves clients, and
// learns the member IDs.
func startAll(ctx context.Context, opts Options, members []*EtcdNode) error {
	ctx, cancel := context.WithTimeout(ctx, opts.StartTimeout)
	defer cancel()
	errs := make([]error, len(members))
	var wg sync.WaitGroup
	for i, n := range members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if errs[i] = n.start(ctx, dataKeep); errs[i] == nil {
				errs[i] = n.WaitReady(ctx)
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return learnIDs(ctx, members)
}

// etcdPeers is the bookkeeping the members of one cluster share: which
// members are partitioned, so that every peer proxy drops the raft traffic
// those members start.
type etcdPeers struct {
	mu      sync.Mutex
	members []*EtcdNode
	cut     []bool
}

// setCut records whether member i is partitioned and sets every member's
// peer filter to the partitioned members other than itself.
func (ps *etcdPeers) setCut(i int, cut bool) error {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.cut[i] = cut
	var errs []error
	for j, m := range ps.members {
		var from []string
		for k, c := range ps.cut {
			if c && k != j {
				from = append(from, ps.members[k].PeerURL())
			}
		}
		if err := m.front[1].setBlocked(from); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", m.Name(), err))
		}
	}
	return errors.Join(errs...)
}
