// Package watchdog runs the invariant checks of the orders database
// periodically and reports them: as the Prometheus gauge
// orders_invariant_violations{check}, which the correctness alerts of
// deploy/prometheus/alerts.yml read, and as one Error log line per
// violating row.
//
// A round runs [store.CheckInvariants] (the queries of
// orders/store/invariants.sql) and one check of its own, [CheckStuckPaying]:
// orders left in PAYING for longer than the payment reconciler should need
// to settle them. The stuck_paying query lives here rather than in
// invariants.sql because it takes a parameter (the age), and that file
// holds parameterless queries that operators also run with psql.
package watchdog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/quorumlock/quorumlock/internal/option"
	"github.com/quorumlock/quorumlock/orders/store"
)

// CheckStuckPaying names the watchdog's own check: orders in PAYING whose
// updated_at (set when they entered PAYING; the reconciler's attempts touch
// the payments row, not the order) is older than the stuck-PAYING age.
const CheckStuckPaying = "stuck_paying"

// Defaults of the options.
const (
	// DefaultInterval is the time between two rounds of [Watchdog.Run].
	DefaultInterval = time.Minute
	// DefaultStuckPayingAfter is how long an order may stay PAYING before
	// stuck_paying counts it.
	DefaultStuckPayingAfter = 10 * time.Minute
	// DefaultTimeout bounds one round of [Watchdog.Run].
	DefaultTimeout = 30 * time.Second
)

// Checks returns the names of the checks a round runs, in the order of
// [Report.Violations]: the invariants of [store.CheckInvariants], then
// [CheckStuckPaying]. Each is a check label of orders_invariant_violations.
func Checks() []string {
	return []string{
		store.InvariantNonNegativeStock,
		store.InvariantOneOrderPerKey,
		store.InvariantStockBalance,
		store.InvariantOrderLinesAddUp,
		store.InvariantOneChargePerPaymentRequest,
		CheckStuckPaying,
	}
}

// Report is the outcome of one round of checks.
type Report struct {
	// Violations holds one entry per violating row, check by check in the
	// order of [Checks]; none when the database is healthy. A round that
	// failed holds the violations found before the failure.
	Violations []store.Violation
}

// Count returns the number of violating rows of check.
func (r Report) Count(check string) int {
	n := 0
	for _, v := range r.Violations {
		if v.Invariant == check {
			n++
		}
	}
	return n
}

// Counts returns the number of violating rows of every check of [Checks]
// (0 for a healthy one) and of any other check the report holds.
func (r Report) Counts() map[string]int {
	out := make(map[string]int)
	for _, c := range Checks() {
		out[c] = 0
	}
	for _, v := range r.Violations {
		out[v.Invariant]++
	}
	return out
}

// Option configures a [Watchdog]. [New] checks the values; a nil option
// is an error wrapping [store.ErrInvalid].
type Option func(*settings) error

// errOption is what a nil option's error wraps.
var errOption = fmt.Errorf("watchdog: %w", store.ErrInvalid)

type settings struct {
	interval, stuckAfter, timeout time.Duration
	log                           *slog.Logger
	reg                           prometheus.Registerer
}

// WithInterval sets the time between two rounds of [Watchdog.Run]
// (default [DefaultInterval]). It must be positive.
func WithInterval(d time.Duration) Option {
	return func(s *settings) error { s.interval = d; return nil }
}

// WithStuckPayingAfter sets how long an order may stay PAYING before the
// stuck_paying check counts it (default [DefaultStuckPayingAfter]). It
// must be positive; keep it well above the time the payment reconciler
// needs to settle a payment whose reply was lost, or healthy payments page.
func WithStuckPayingAfter(d time.Duration) Option {
	return func(s *settings) error { s.stuckAfter = d; return nil }
}

// WithTimeout bounds each round of [Watchdog.Run] (default
// [DefaultTimeout]), so that a database that hangs fails the round instead
// of freezing the watchdog. It must be positive. [Watchdog.CheckOnce] is
// bounded by its context only.
func WithTimeout(d time.Duration) Option {
	return func(s *settings) error { s.timeout = d; return nil }
}

// WithLogger sets the logger of violations (Error) and failed rounds
// (Warn). The default discards everything.
func WithLogger(l *slog.Logger) Option {
	return func(s *settings) error { s.log = l; return nil }
}

// WithRegisterer registers the watchdog's metrics on reg. Without it (or
// with nil) the metrics are kept but exported nowhere.
func WithRegisterer(reg prometheus.Registerer) Option {
	return func(s *settings) error { s.reg = reg; return nil }
}

// Watchdog runs the checks and publishes their results. Its methods are
// safe for concurrent use; rounds never overlap.
type Watchdog struct {
	db                            store.Beginner
	interval, stuckAfter, timeout time.Duration
	log                           *slog.Logger
	violations                    *prometheus.GaugeVec
	errors                        prometheus.Counter

	mu     sync.Mutex      // serializes rounds
	labels map[string]bool // every check label set so far; guarded by mu
}

// New returns a watchdog over db (a *pgxpool.Pool in production) and
// registers its metrics: orders_invariant_violations{check}, one series
// per check of [Checks] at 0 until a round finds rows, and
// orders_invariant_check_errors_total. An invalid option is an error
// wrapping [store.ErrInvalid]; a registration conflict is the
// registerer's error, wrapped.
func New(db store.Beginner, opts ...Option) (*Watchdog, error) {
	s := settings{
		interval:   DefaultInterval,
		stuckAfter: DefaultStuckPayingAfter,
		timeout:    DefaultTimeout,
		log:        slog.New(slog.DiscardHandler),
	}
	if err := option.Apply(&s, opts, errOption); err != nil {
		return nil, err
	}
	switch {
	case db == nil:
		return nil, fmt.Errorf("watchdog: %w: nil database", store.ErrInvalid)
	case s.interval <= 0:
		return nil, fmt.Errorf("watchdog: %w: interval %v is not positive", store.ErrInvalid, s.interval)
	case s.stuckAfter <= 0:
		return nil, fmt.Errorf("watchdog: %w: stuck-PAYING age %v is not positive", store.ErrInvalid, s.stuckAfter)
	case s.timeout <= 0:
		return nil, fmt.Errorf("watchdog: %w: round timeout %v is not positive", store.ErrInvalid, s.timeout)
	case s.log == nil:
		return nil, fmt.Errorf("watchdog: %w: nil logger", store.ErrInvalid)
	}
	w := &Watchdog{
		db: db, interval: s.interval, stuckAfter: s.stuckAfter, timeout: s.timeout, log: s.log,
		violations: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "orders_invariant_violations",
			Help: "Rows breaking each invariant check of the orders database at the last successful round (0: healthy).",
		}, []string{"check"}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "orders_invariant_check_errors_total",
			Help: "Rounds of invariant checks that failed (the gauges keep the values of the last successful round).",
		}),
		labels: make(map[string]bool),
	}
	for _, c := range Checks() {
		w.violations.WithLabelValues(c).Set(0)
		w.labels[c] = true
	}
	if s.reg != nil {
		for _, c := range []prometheus.Collector{w.violations, w.errors} {
			if err := s.reg.Register(c); err != nil {
				return nil, fmt.Errorf("watchdog: register metrics: %w", err)
			}
		}
	}
	return w, nil
}

// Run runs a round of checks at once, then every interval, each bounded by
// the round timeout, until ctx ends; then it returns ctx's error. It runs
// on the caller's goroutine and starts none. A failed round is logged and
// counted (see [Watchdog.CheckOnce]) and does not stop Run.
func (w *Watchdog) Run(ctx context.Context) error {
	t := time.NewTicker(w.interval)
	defer t.Stop()
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		rctx, cancel := context.WithTimeout(ctx, w.timeout)
		_, _ = w.CheckOnce(rctx)
		cancel()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// CheckOnce runs one round of checks and publishes it. Every violating row
// is logged at Error with its check and row. A successful round sets
// orders_invariant_violations{check} to the number of rows of each check.
// A failed round (database down, a query failing) returns the violations
// found before the failure with the error, leaves the gauges as they were,
// increments orders_invariant_check_errors_total and logs at Warn; a round
// cut short because ctx was cancelled is returned as such but neither
// counted nor logged as a failure.
func (w *Watchdog) CheckOnce(ctx context.Context) (Report, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	rep, err := w.check(ctx)
	for _, v := range rep.Violations {
		w.log.Error("invariant violated", "check", v.Invariant, "row", v.Detail)
	}
	if err != nil {
		if errors.Is(ctx.Err(), context.Canceled) {
			return rep, err
		}
		w.errors.Inc()
		w.log.Warn("invariant checks failed; orders_invariant_violations keeps its last values", "err", err)
		return rep, err
	}
	counts := rep.Counts()
	for c := range counts {
		w.labels[c] = true
	}
	for _, c := range slices.Sorted(maps.Keys(w.labels)) {
		w.violations.WithLabelValues(c).Set(float64(counts[c]))
	}
	if len(rep.Violations) == 0 {
		w.log.Debug("invariant checks passed")
	}
	return rep, nil
}

// check runs every check in one read-only transaction, always rolled back.
func (w *Watchdog) check(ctx context.Context) (Report, error) {
	tx, err := w.db.Begin(ctx)
	if err != nil {
		return Report{}, fmt.Errorf("watchdog: begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, `SET TRANSACTION READ ONLY`); err != nil {
		return Report{}, fmt.Errorf("watchdog: read only: %w", err)
	}
	vs, err := store.CheckInvariants(ctx, tx)
	if err != nil {
		return Report{Violations: vs}, fmt.Errorf("watchdog: %w", err)
	}
	stuck, err := stuckPaying(ctx, tx, w.stuckAfter)
	vs = append(vs, stuck...)
	if err != nil {
		return Report{Violations: vs}, err
	}
	return Report{Violations: vs}, nil
}

// stuckPayingSQL lists the orders in PAYING whose updated_at is older than
// $1 seconds by the database's clock, oldest first, with their products
// (a cart's, joined by commas), payment request ids and statuses
// (orders_status_updated_idx serves the filter).
const stuckPayingSQL = `SELECT o.order_id, o.user_id,
       COALESCE(o.product_id, (SELECT string_agg(l.product_id, ',' ORDER BY l.product_id)
        FROM order_lines l WHERE l.order_id = o.order_id), '') AS product_id, o.updated_at,
       extract(epoch FROM now() - o.updated_at)::bigint AS paying_seconds,
       (SELECT string_agg(p.payment_request_id || ' ' || p.status, ', ' ORDER BY p.payment_request_id)
        FROM payments p WHERE p.order_id = o.order_id) AS payments
FROM orders o
WHERE o.status = 'PAYING' AND o.updated_at < now() - make_interval(secs => $1)
ORDER BY o.updated_at, o.order_id`

// stuckPaying runs the stuck_paying check in tx.
func stuckPaying(ctx context.Context, tx pgx.Tx, age time.Duration) ([]store.Violation, error) {
	rows, err := tx.Query(ctx, stuckPayingSQL, age.Seconds())
	if err != nil {
		return nil, fmt.Errorf("watchdog: check %s: %w", CheckStuckPaying, err)
	}
	defer rows.Close()
	var out []store.Violation
	for rows.Next() {
		var (
			orderID, userID, productID string
			since                      time.Time
			seconds                    int64
			payments                   *string
		)
		if err := rows.Scan(&orderID, &userID, &productID, &since, &seconds, &payments); err != nil {
			return out, fmt.Errorf("watchdog: check %s: %w", CheckStuckPaying, err)
		}
		pays := "NULL"
		if payments != nil {
			pays = quote(*payments)
		}
		out = append(out, store.Violation{Invariant: CheckStuckPaying, Detail: fmt.Sprintf(
			"order_id=%s user_id=%s product_id=%s paying_since=%s paying_for=%s payments=%s",
			quote(orderID), quote(userID), quote(productID), since.UTC().Format(time.RFC3339),
			time.Duration(seconds)*time.Second, pays)})
	}
	if err := rows.Err(); err != nil {
		return out, fmt.Errorf("watchdog: check %s: %w", CheckStuckPaying, err)
	}
	return out, nil
}

// quote renders a text value of a Detail as store.Violation describes:
// quoted when it is empty or holds whitespace, a quote or an equals sign.
func quote(s string) string {
	if s == "" || strings.ContainsAny(s, " \t\n\"=") {
		return strconv.Quote(s)
	}
	return s
}
