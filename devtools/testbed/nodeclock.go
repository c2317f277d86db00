package testbed

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// SetClockOffset moves the node's wall clock to d from the real one (0 for
// the real time), at once and without a restart: the server's
// CLOCK_REALTIME, gettimeofday and time read the real clock plus d. Its
// monotonic clock does not move, so timers keep their pace; what moves is
// what Redis compares with wall-clock instants: key expiry, TIME, the
// absolute expiry times (PXAT) written to the AOF. The offset stays across
// Kill and Restart.
//
// It needs a bed started with Options.Clock; without, the error wraps
// errors.ErrUnsupported.
func (n *RedisNode) SetClockOffset(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s: clock offset: %w", n.srv.name, err)
	}
	c := n.clock
	if c == nil {
		return fmt.Errorf("%s: clock offset: the bed was started without Options.Clock: %w", n.srv.name, errors.ErrUnsupported)
	}
	if err := c.write(offsetWall, d); err != nil {
		return fmt.Errorf("%s: clock offset: %w", n.srv.name, err)
	}
	return nil
}

// SetClockOffset moves the member's wall clock to d from the real one (0
// for the real time), at once and without a restart, like
// RedisNode.SetClockOffset. etcd is a Go program, which reads the time
// through the vDSO rather than the C library; the shim gives the member a
// vDSO of its own (see clockshim.c), so Go's time.Now reads the real wall
// clock plus d. The monotonic reading that time.Now carries does not move.
//
// What moves in etcd: the wall-clock times it reports (the Date header of
// its HTTP answers, its logs, the clock drift its peers' probes report),
// and the wall-clock deadline in its lease expiry queue. etcd revokes a
// lease only when both its wall and its monotonic clock say it expired, so
// a wall jump alone expires nothing early; AdvanceMonotonic is the other
// half. The offset stays across Kill and Restart.
//
// It needs a bed started with Options.Clock; without, the error wraps
// errors.ErrUnsupported.
func (n *EtcdNode) SetClockOffset(ctx context.Context, d time.Duration) error {
	if err := n.clockReady(ctx); err != nil {
		return fmt.Errorf("%s: clock offset: %w", n.srv.name, err)
	}
	if err := n.clock.write(offsetWall, d); err != nil {
		return fmt.Errorf("%s: clock offset: %w", n.srv.name, err)
	}
	return nil
}

// AdvanceMonotonic moves the member's monotonic clock (CLOCK_MONOTONIC and
// CLOCK_BOOTTIME) forward by d, at once: the member sees d more time pass
// than did, as after a suspended VM resumes. Jumps add up; the monotonic
// clock never goes back, so d must be positive.
//
// In etcd it moves what Go measures with the monotonic clock: lease time
// to live (LeaseTimeToLive on the leader reports d less) and timers (a
// timer due within d fires at once; a ticker, such as raft's, delivers one
// tick for the jump, not d's worth). A leader
// whose wall clock and monotonic clock both jumped past a lease's expiry
// revokes the lease at once (see SetClockOffset). The offset stays across
// Kill and Restart.
//
// It needs a bed started with Options.Clock; without, the error wraps
// errors.ErrUnsupported.
func (n *EtcdNode) AdvanceMonotonic(ctx context.Context, d time.Duration) error {
	if err := n.clockReady(ctx); err != nil {
		return fmt.Errorf("%s: advance monotonic: %w", n.srv.name, err)
	}
	if d <= 0 {
		return fmt.Errorf("%s: advance monotonic by %v: the monotonic clock only moves forward", n.srv.name, d)
	}
	n.clockMu.Lock()
	defer n.clockMu.Unlock()
	cur, err := n.clock.read(offsetMonotonic)
	if err == nil {
		err = n.clock.write(offsetMonotonic, cur+d)
	}
	if err != nil {
		return fmt.Errorf("%s: advance monotonic: %w", n.srv.name, err)
	}
	return nil
}

func (n *EtcdNode) clockReady(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if n.clock == nil {
		return fmt.Errorf("the bed was started without Options.Clock: %w", errors.ErrUnsupported)
	}
	return nil
}
