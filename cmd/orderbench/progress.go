package main

import (
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// progress is the progress bar on stderr, one step per (scenario, mode)
// run. It does nothing with -quiet or when stderr is not a terminal.
type progress struct {
	bar *progressbar.ProgressBar
}

// newProgress returns a bar of total steps.
func newProgress(total int, quiet bool) *progress {
	if quiet || total == 0 || !term.IsTerminal(int(os.Stderr.Fd())) {
		return &progress{}
	}
	return &progress{bar: progressbar.NewOptions(total,
		progressbar.OptionSetWriter(os.Stderr),
		progressbar.OptionSetDescription("orderbench"),
		progressbar.OptionShowCount(),
		progressbar.OptionSetElapsedTime(true),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionClearOnFinish(),
	)}
}

// start names the run under way.
func (p *progress) start(desc string) {
	if p.bar != nil {
		p.bar.Describe(desc)
	}
}

// done counts one run.
func (p *progress) done() {
	if p.bar != nil {
		_ = p.bar.Add(1)
	}
}

// finish clears the bar.
func (p *progress) finish() {
	if p.bar != nil {
		_ = p.bar.Finish()
	}
}
