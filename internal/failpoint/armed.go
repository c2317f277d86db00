//go:build failpoints

package failpoint

import (
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"
)

// Enabled reports whether this build can arm failpoints: true, because it
// was built with the failpoints tag.
const Enabled = true

// point is one armed failpoint.
type point struct {
	action Action
	at     int64        // the Hit that acts (1: the first)
	hits   atomic.Int64 // Hits so far; only the at-th acts
}

// FromEnv returns the failpoints armed by QUORUMLOCK_FAILPOINTS, read once
// now. An unset or blank variable arms nothing; an unknown failpoint or
// action is an error wrapping ErrInvalid.
func FromEnv() (*Set, error) {
	points, err := parse(os.Getenv(EnvVar))
	if err != nil {
		return nil, err
	}
	return &Set{points: points}, nil
}

// Hit acts on failpoint n if it is armed and has not acted yet: it writes
// "failpoint <n> reached" to standard error, then kills or stops the
// process. A killed process never returns from Hit; a stopped one returns
// once it is continued (SIGCONT).
func (s *Set) Hit(n Name) {
	if s == nil {
		return
	}
	p := s.points[n]
	if p == nil || p.hits.Add(1) != p.at {
		return
	}
	_, _ = os.Stderr.Write([]byte("failpoint " + string(n) + " reached\n"))
	if p.action == Stop {
		stop()
		return
	}
	// SIGKILL sent to oneself is delivered before kill(2) returns: the
	// loop never comes round. It only makes sure nothing runs on.
	for {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		time.Sleep(10 * time.Millisecond)
	}
}

// stopConfirm bounds each wait of stop for the SIGCONT that ends a stop.
const stopConfirm = time.Second

// stopTries bounds the SIGSTOPs stop sends.
const stopTries = 30

// stop freezes the process with SIGSTOP until it is continued. A SIGSTOP
// a process sends itself is now and then dropped (kill returns and the
// process runs on; seen on Linux 6.18, about once in 300 tries), so stop
// sends it again until it sees the SIGCONT that ended a stop, a bounded
// number of times.
func stop() {
	cont := make(chan os.Signal, 1)
	signal.Notify(cont, syscall.SIGCONT)
	defer signal.Stop(cont)
	for range stopTries {
		_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
		if continued(cont) {
			return
		}
	}
}

// continued reports whether a SIGCONT arrives within stopConfirm. Time
// passes while the process is stopped, so after a long stop the timer is
// due the moment the process resumes, together with the SIGCONT: a timeout
// is only believed after a second wait that starts after the resume.
func continued(cont <-chan os.Signal) bool {
	for range 2 {
		t := time.NewTimer(stopConfirm)
		select {
		case <-cont:
			t.Stop()
			return true
		case <-t.C:
		}
	}
	return false
}
