package metrics_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/quorumlock/quorumlock/orders/internal/metrics"
)

// The labelled counters the alerts read exist at zero before their first
// event, so that increase() counts that event after a restart.
func TestMetricsStartAtZero(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := metrics.New(reg); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]int{
		"orders_place_total":              13,
		"orders_idempotency_claims_total": 6,
		"orders_lock_fallback_total":      2,
	} {
		if n, err := testutil.GatherAndCount(reg, name); err != nil || n != want {
			t.Errorf("%s: %d series, %v; want %d at zero", name, n, err, want)
		}
	}
}
