package watchdog_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/quorumlock/quorumlock/orders/store"
	"github.com/quorumlock/quorumlock/orders/watchdog"
)

// downDB is a database that never answers.
type downDB struct{}

func (downDB) Begin(context.Context) (pgx.Tx, error) { return nil, errors.New("connection refused") }

// TestNewRefusesBadOptions: every invalid setting is an error wrapping
// store.ErrInvalid, and no watchdog.
func TestNewRefusesBadOptions(t *testing.T) {
	for name, c := range map[string]struct {
		db   store.Beginner
		opt  watchdog.Option
		want string
	}{
		"nil database":       {nil, watchdog.WithInterval(time.Second), "nil database"},
		"zero interval":      {downDB{}, watchdog.WithInterval(0), "interval"},
		"negative interval":  {downDB{}, watchdog.WithInterval(-time.Second), "interval"},
		"zero stuck age":     {downDB{}, watchdog.WithStuckPayingAfter(0), "stuck-PAYING age"},
		"negative stuck age": {downDB{}, watchdog.WithStuckPayingAfter(-time.Minute), "stuck-PAYING age"},
		"zero timeout":       {downDB{}, watchdog.WithTimeout(0), "timeout"},
		"nil logger":         {downDB{}, watchdog.WithLogger(nil), "logger"},
		"nil option":         {downDB{}, nil, "option 0 is nil"},
	} {
		t.Run(name, func(t *testing.T) {
			w, err := watchdog.New(c.db, c.opt)
			if w != nil || !errors.Is(err, store.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("New: %v, %v; want an ErrInvalid naming %q", w, err, c.want)
			}
		})
	}
}

// TestRegistration: the metrics go on the registerer given, once; a second
// watchdog on the same registry is a registration error, wrapped. Without
// a registerer nothing is registered anywhere.
func TestRegistration(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := watchdog.New(downDB{}, watchdog.WithRegisterer(reg)); err != nil {
		t.Fatal(err)
	}
	_, err := watchdog.New(downDB{}, watchdog.WithRegisterer(reg))
	var dup prometheus.AlreadyRegisteredError
	if !errors.As(err, &dup) {
		t.Fatalf("second watchdog on one registry: %v", err)
	}
	if _, err := watchdog.New(downDB{}); err != nil {
		t.Fatal(err)
	}
	if _, err := watchdog.New(downDB{}, watchdog.WithRegisterer(nil), watchdog.WithLogger(slog.Default())); err != nil {
		t.Fatal(err)
	}
}

// TestDatabaseDown needs no server: a round whose Begin fails returns the
// driver's error wrapped, counts one error and leaves the gauges at 0.
func TestDatabaseDown(t *testing.T) {
	d := newDog(t, downDB{})
	_, err := d.CheckOnce(context.Background())
	if err == nil || !strings.Contains(err.Error(), "connection refused") || !strings.HasPrefix(err.Error(), "watchdog: ") {
		t.Fatalf("CheckOnce: %v", err)
	}
	d.wantMetrics(t, nil, 1)
	if n := d.log.count(t, "WARN", "invariant checks failed; orders_invariant_violations keeps its last values"); n != 1 {
		t.Fatalf("%d Warn records, want 1", n)
	}
}

// TestReportCounts: Counts names every check, healthy ones at 0.
func TestReportCounts(t *testing.T) {
	rep := watchdog.Report{Violations: []store.Violation{
		{Invariant: store.InvariantStockBalance, Detail: "a"},
		{Invariant: store.InvariantStockBalance, Detail: "b"},
		{Invariant: watchdog.CheckStuckPaying, Detail: "c"},
	}}
	got := rep.Counts()
	if len(got) != 6 || got[store.InvariantStockBalance] != 2 || got[watchdog.CheckStuckPaying] != 1 || got[store.InvariantNonNegativeStock] != 0 {
		t.Fatalf("Counts %v", got)
	}
	if rep.Count(store.InvariantStockBalance) != 2 || rep.Count(store.InvariantOneOrderPerKey) != 0 {
		t.Fatalf("Count")
	}
	want := []string{"non_negative_stock", "one_order_per_idempotency_key", "stock_balance", "order_lines_add_up", "one_charge_per_payment_request", "stuck_paying"}
	if got := watchdog.Checks(); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("Checks %q, want the labels deploy/prometheus/alerts.yml reads, %q", got, want)
	}
}
