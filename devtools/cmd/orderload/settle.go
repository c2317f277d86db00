package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

const (
	// requestsMetric counts the requests an instance has answered, by
	// route and status: every POST /orders is counted once its handler
	// returns, also when its client had gone.
	requestsMetric = "orders_http_request_duration_seconds_count"
	// createRoute is the route label of POST /orders.
	createRoute = `route="POST /orders"`
	// settlePoll is how often the settle step reads the instances'
	// counters.
	settlePoll = 100 * time.Millisecond
	// maxMetricsBytes bounds one /metrics read.
	maxMetricsBytes = 4 << 20
)

// answeredCreates sums, over a /metrics text exposition, the POST /orders
// requests answered.
func answeredCreates(r io.Reader) (int64, error) {
	var n int64
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, requestsMetric+"{") || !strings.Contains(line, createRoute) {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			return 0, fmt.Errorf("metrics line %q: %w", line, err)
		}
		n += int64(v)
	}
	return n, sc.Err()
}

// answered sums answeredCreates over every instance.
func (l *loader) answered(ctx context.Context) (int64, error) {
	var sum int64
	for _, base := range l.urls {
		n, err := l.scrape(ctx, base)
		if err != nil {
			return 0, err
		}
		sum += n
	}
	return sum, nil
}

// scrape reads the answered POST /orders of the instance at base.
func (l *loader) scrape(ctx context.Context, base string) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := l.client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("metrics of %s: %w", base, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("metrics of %s: status %d", base, resp.StatusCode)
	}
	n, err := answeredCreates(io.LimitReader(resp.Body, maxMetricsBytes))
	if err != nil {
		return 0, fmt.Errorf("metrics of %s: %w", base, err)
	}
	return n, nil
}

// settle waits, for at most d, until the instances have answered want
// more POST /orders than before (base): then every request the clients
// gave up on has run its course, and the database holds what it will. It
// returns how many were answered.
func (l *loader) settle(ctx context.Context, base, want int64, d time.Duration) (int64, error) {
	deadline := time.Now().Add(d)
	tick := time.NewTicker(settlePoll)
	defer tick.Stop()
	for {
		n, err := l.answered(ctx)
		if err != nil {
			return 0, err
		}
		if n-base >= want || !time.Now().Before(deadline) {
			return n - base, nil
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-tick.C:
		}
	}
}
