package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/quorumlock/quorumlock/internal/benchkit"
)

// flashConfigJSON is the sale of flash and mixed, and the buyers' bounds.
type flashConfigJSON struct {
	Units          int    `json:"units"`
	Buyers         int    `json:"buyers"`
	SpreadNs       int64  `json:"spread_ns"`
	Seed           uint64 `json:"seed"`
	MaxRetryWaitNs int64  `json:"max_retry_wait_ns"`
	MaxTries       int    `json:"max_tries"`
	MaxBuyerTimeNs int64  `json:"max_buyer_time_ns"`
}

// saleJSON is one flash sale. Times are from the sale's start.
type saleJSON struct {
	Product string `json:"product"`
	Units   int    `json:"units"`
	Buyers  int    `json:"buyers"`
	// SoldOut: no stock was left after the sale. SoldOutAfterNs is then
	// the time to the last 201 (0 when it did not sell out).
	SoldOut        bool  `json:"sold_out"`
	SoldOutAfterNs int64 `json:"sold_out_after_ns"`
	// AllAnswered: every buyer got a final answer (201 or 409 out of
	// stock). AllAnsweredAfterNs is the time to the last one.
	AllAnswered        bool  `json:"all_answered"`
	AllAnsweredAfterNs int64 `json:"all_answered_after_ns"`
	// AnswerLatency is from a buyer's first request to its final answer.
	AnswerLatency benchkit.LatencyStats `json:"answer_latency"`
	// Answers counts the buyers by the answer that ended them: "201",
	// "409 out_of_stock", "none" (out of tries or time), or any other
	// answer no retry changes. NoFinalAnswer counts all but the first two.
	Answers       map[string]int `json:"answers"`
	Created       int            `json:"created"`
	OutOfStock    int            `json:"out_of_stock"`
	NoFinalAnswer int            `json:"no_final_answer"`
	// Requests counts every request of the buyers, Retries those after a
	// buyer's first, Seen503 the 503 answers.
	Requests   int    `json:"requests"`
	Retries    int    `json:"retries"`
	Seen503    int    `json:"seen_503"`
	FirstError string `json:"first_transport_error,omitempty"`
	// PeakDBConns is the peak of database connections in use during the
	// sale, sampled every 20ms; -1 when not sampled.
	PeakDBConns int `json:"peak_db_conns"`
	// The database after the sale: units its orders hold, units sold
	// beyond the stock (must be 0), stock left, and the check.
	SoldUnits int64       `json:"sold_units"`
	Oversold  int64       `json:"oversold"`
	StockLeft int64       `json:"stock_left"`
	Check     checkResult `json:"check"`
}

// mixedJSON is mixed's closed-loop clients during the sale and without
// it, for as long. P99Ratio is the p99 during over the p99 without.
type mixedJSON struct {
	During   phaseJSON `json:"during_sale"`
	Without  phaseJSON `json:"without_sale"`
	P99Ratio *float64  `json:"p99_ratio,omitempty"`
}

// saleComparisonJSON compares lock mode on one backend with db mode in a
// scenario with a flash sale. The ratios are absent when a figure is 0.
type saleComparisonJSON struct {
	Scenario string `json:"scenario"`
	Backend  string `json:"backend"`
	Postgres string `json:"postgres"`
	// AllAnsweredRatio is db's time to the last final answer over lock's:
	// above 1, lock answered every buyer sooner.
	LockAllAnsweredNs int64    `json:"lock_all_answered_after_ns"`
	DBAllAnsweredNs   int64    `json:"db_all_answered_after_ns"`
	AllAnsweredRatio  *float64 `json:"all_answered_ratio,omitempty"`
	// SoldOutRatio is db's time to the last 201 over lock's.
	LockSoldOutNs int64    `json:"lock_sold_out_after_ns"`
	DBSoldOutNs   int64    `json:"db_sold_out_after_ns"`
	SoldOutRatio  *float64 `json:"sold_out_ratio,omitempty"`
	// Mixed: the closed-loop clients' p99 during the sale; DuringP99Ratio
	// is lock's over db's (below 1: lock's is lower).
	LockDuringP99Ns int64    `json:"lock_during_p99_ns,omitempty"`
	DBDuringP99Ns   int64    `json:"db_during_p99_ns,omitempty"`
	DuringP99Ratio  *float64 `json:"during_p99_ratio,omitempty"`
	// The buyers without a final answer, per mode.
	LockNoFinalAnswer int `json:"lock_no_final_answer"`
	DBNoFinalAnswer   int `json:"db_no_final_answer"`
}

// flashConfigFigures is the sale's part of the configuration.
func flashConfigFigures(f flashConfig) *flashConfigJSON {
	return &flashConfigJSON{Units: f.units, Buyers: f.buyers, SpreadNs: int64(f.spread), Seed: f.seed,
		MaxRetryWaitNs: int64(maxRetryWait), MaxTries: maxBuyerTries, MaxBuyerTimeNs: int64(maxBuyerTime)}
}

// saleFigures merges the buyers of a sale.
func saleFigures(s *saleResult) *saleJSON {
	sj := &saleJSON{Product: s.product, Units: s.units, Buyers: len(s.buyers), Answers: map[string]int{},
		PeakDBConns: s.peakConns, SoldUnits: s.soldUnits, Oversold: s.oversold(), StockLeft: s.stockLeft,
		SoldOut: s.stockLeft == 0, Check: s.check}
	for _, r := range s.buyers {
		sj.Requests += r.tries
		sj.Retries += max(r.tries-1, 0)
		sj.Seen503 += r.busy
		if sj.FirstError == "" {
			sj.FirstError = r.firstError
		}
		key := r.final
		if key == "" {
			key = answerNone
		}
		sj.Answers[key]++
		if !r.isFinal() {
			sj.NoFinalAnswer++
			continue
		}
		after := int64(r.answered.Sub(s.start))
		sj.AllAnsweredAfterNs = max(sj.AllAnsweredAfterNs, after)
		if r.final == answerCreated {
			sj.Created++
			sj.SoldOutAfterNs = max(sj.SoldOutAfterNs, after)
		} else {
			sj.OutOfStock++
		}
	}
	if !sj.SoldOut {
		sj.SoldOutAfterNs = 0
	}
	sj.AllAnswered = sj.NoFinalAnswer == 0
	sj.AnswerLatency = benchkit.Summarize(s.answerLatencies())
	return sj
}

// mixedFigures compares mixed's closed-loop clients during the sale and
// without it.
func mixedFigures(during, without phaseJSON) *mixedJSON {
	m := &mixedJSON{During: during, Without: without}
	if during.Latency201.Count > 0 && without.Latency201.Count > 0 {
		m.P99Ratio = new(float64(during.Latency201.P99ns) / float64(without.Latency201.P99ns))
	}
	return m
}

// compareSales compares each lock backend with db in every scenario with a
// sale that ran in both.
func compareSales(runs []runJSON) []saleComparisonJSON {
	var out []saleComparisonJSON
	hasSale := func(sc string) bool { return sc == scenarioFlash || sc == scenarioMixed }
	for _, pair := range modePairs(runs, hasSale) {
		lock, db := pair[0], pair[1]
		c := saleComparisonJSON{Scenario: lock.Name, Backend: lock.Backend, Postgres: lock.Postgres,
			LockAllAnsweredNs: lock.Sale.AllAnsweredAfterNs, DBAllAnsweredNs: db.Sale.AllAnsweredAfterNs,
			LockSoldOutNs: lock.Sale.SoldOutAfterNs, DBSoldOutNs: db.Sale.SoldOutAfterNs,
			LockNoFinalAnswer: lock.Sale.NoFinalAnswer, DBNoFinalAnswer: db.Sale.NoFinalAnswer}
		c.AllAnsweredRatio = ratioOf(c.DBAllAnsweredNs, c.LockAllAnsweredNs)
		c.SoldOutRatio = ratioOf(c.DBSoldOutNs, c.LockSoldOutNs)
		if lock.Mixed != nil && db.Mixed != nil {
			c.LockDuringP99Ns, c.DBDuringP99Ns = lock.Mixed.During.Latency201.P99ns, db.Mixed.During.Latency201.P99ns
			c.DuringP99Ratio = ratioOf(c.LockDuringP99Ns, c.DBDuringP99Ns)
		}
		out = append(out, c)
	}
	return out
}

// ratioOf returns a/b, or nil when either is not positive.
func ratioOf(a, b int64) *float64 {
	if a <= 0 || b <= 0 {
		return nil
	}
	return new(float64(a) / float64(b))
}

// reportSales prints the table of the flash sales, flash's and mixed's.
func reportSales(out io.Writer, s summaryJSON) {
	var rows []runJSON
	for _, r := range s.Runs {
		if r.Sale != nil {
			rows = append(rows, r)
		}
	}
	if len(rows) == 0 || s.Config.Flash == nil {
		return
	}
	f := s.Config.Flash
	fmt.Fprintln(out)
	fmt.Fprintf(out, "Flash sales (flash, mixed): %d units of one product, %d buyers each its own user with one key, first requests spread uniformly over %v (seed %d),\n",
		f.Units, f.Buyers, time.Duration(f.SpreadNs), f.Seed)
	fmt.Fprintf(out, "round-robin over the instances; on a 503 a buyer waits its Retry-After (at most %v) and sends again, at most %d tries or %v.\n",
		time.Duration(f.MaxRetryWaitNs), f.MaxTries, time.Duration(f.MaxBuyerTimeNs))
	fmt.Fprintln(out, "Times from the sale's start; answer latency: a buyer's first request to its final answer (201 or 409 out of stock); peak db conns:")
	fmt.Fprintln(out, "connections in use (pg_stat_activity, every 20ms); check: one order per 201, none for a 409, no unit oversold, no stock below 0.")
	fmt.Fprintln(out)
	fmt.Fprintln(out, "| scenario | mode | units | buyers | sold out after | every buyer answered after | answer p50 | answer p99 | 201 | 409 | no final answer | retries | 503s | peak db conns | oversold | check |")
	fmt.Fprintln(out, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
	for _, r := range rows {
		sj := r.Sale
		l := sj.AnswerLatency
		fmt.Fprintf(out, "| %s | %s | %d | %d | %s | %s | %s | %s | %d | %d | %s | %d | %d | %s | %d | %s |\n",
			r.Name, runLabel(r), sj.Units, sj.Buyers, fmtSoldOut(sj), fmtAllAnswered(sj),
			benchkit.FormatLatency(l.P50ns, l.Count), benchkit.FormatLatency(l.P99ns, l.Count),
			sj.Created, sj.OutOfStock, fmtNoFinal(sj), sj.Retries, sj.Seen503, fmtConns(sj.PeakDBConns), sj.Oversold, fmtCheck(sj.Check))
	}
}

// reportMixed prints the table of mixed's closed-loop clients, without
// the sale and during it.
func reportMixed(out io.Writer, s summaryJSON) {
	var rows []runJSON
	for _, r := range s.Runs {
		if r.Mixed != nil {
			rows = append(rows, r)
		}
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintln(out)
	fmt.Fprintf(out, "Mixed: %d closed-loop clients order distinct products during the sale (from its start until every buyer is done, %v at least),\n",
		s.Config.Clients, time.Duration(s.Config.DurationNs))
	fmt.Fprintf(out, "then without it for as long, each phase after a %v warm-up; orders/s and p99 over each window's 201s.\n", time.Duration(s.Config.WarmupNs))
	fmt.Fprintln(out)
	fmt.Fprintln(out, "| mode | window | orders/s without | orders/s during | p99 without | p99 during | p99 during/without | peak db conns without | peak db conns during | other answers during | check |")
	fmt.Fprintln(out, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|")
	for _, r := range rows {
		m := r.Mixed
		w, d := m.Without.Latency201, m.During.Latency201
		fmt.Fprintf(out, "| %s | %s | %.0f | %.0f | %s | %s | %s | %s | %s | %s | %s |\n", runLabel(r),
			benchkit.FormatLatency(m.During.WindowNs, 1), m.Without.CreatedPerSec, m.During.CreatedPerSec,
			benchkit.FormatLatency(w.P99ns, w.Count), benchkit.FormatLatency(d.P99ns, d.Count), fmtRatio(m.P99Ratio),
			fmtConns(m.Without.PeakDBConns), fmtConns(m.During.PeakDBConns), fmtOther(m.During.Other), fmtCheck(r.Check))
	}
}

// reportSaleComparisons prints how each lock backend compares with db in
// each scenario with a sale.
func reportSaleComparisons(out io.Writer, cmps []saleComparisonJSON) {
	for _, c := range cmps {
		lock := modeLabel(modeLock, c.Backend)
		parts := []string{}
		if c.DuringP99Ratio != nil {
			parts = append(parts, fmt.Sprintf("distinct p99 during the sale: %s %.2fx db's (%s %s, db %s)", lock, *c.DuringP99Ratio,
				lock, benchkit.FormatLatency(c.LockDuringP99Ns, 1), benchkit.FormatLatency(c.DBDuringP99Ns, 1)))
		}
		parts = append(parts, sooner("every buyer answered", lock, c.AllAnsweredRatio, c.LockAllAnsweredNs, c.DBAllAnsweredNs),
			sooner("sold out", lock, c.SoldOutRatio, c.LockSoldOutNs, c.DBSoldOutNs))
		if c.LockNoFinalAnswer > 0 || c.DBNoFinalAnswer > 0 {
			parts = append(parts, fmt.Sprintf("buyers without a final answer: %s %d, db %d", lock, c.LockNoFinalAnswer, c.DBNoFinalAnswer))
		}
		fmt.Fprintf(out, "- %s%s, %s vs db: %s\n", c.Scenario, onHA(c.Postgres), lock, strings.Join(parts, "; "))
	}
}

// sooner says which of lock (lock mode's label) and db got to what first,
// by what ratio (db's time over lock's), and both times.
func sooner(what, lock string, ratio *float64, lockNs, dbNs int64) string {
	times := fmt.Sprintf("(%s %s, db %s)", lock, fmtAfter(lockNs), fmtAfter(dbNs))
	switch {
	case ratio == nil:
		return what + ": " + times
	case *ratio >= 1:
		return fmt.Sprintf("%s %.2fx sooner with %s %s", what, *ratio, lock, times)
	}
	return fmt.Sprintf("%s %.2fx sooner with db %s", what, 1 / *ratio, times)
}

// fmtAfter prints a time from the sale's start, or "-" for none.
func fmtAfter(ns int64) string {
	if ns <= 0 {
		return "-"
	}
	return benchkit.FormatLatency(ns, 1)
}

// fmtSoldOut prints when the sale sold out, or how much it left.
func fmtSoldOut(sj *saleJSON) string {
	if !sj.SoldOut {
		return fmt.Sprintf("not sold out (%d left)", sj.StockLeft)
	}
	return fmtAfter(sj.SoldOutAfterNs)
}

// fmtAllAnswered prints when the last buyer got its final answer, marking
// a sale where some got none.
func fmtAllAnswered(sj *saleJSON) string {
	if !sj.AllAnswered {
		return fmt.Sprintf("%s (%d never)", fmtAfter(sj.AllAnsweredAfterNs), sj.NoFinalAnswer)
	}
	return fmtAfter(sj.AllAnsweredAfterNs)
}

// fmtNoFinal prints the buyers without a final answer, by what ended
// them when any answer did.
func fmtNoFinal(sj *saleJSON) string {
	var other []string
	for _, k := range slices.Sorted(maps.Keys(sj.Answers)) {
		if k != answerCreated && k != answerOutOfStock && k != answerNone {
			other = append(other, fmt.Sprintf("%s: %d", k, sj.Answers[k]))
		}
	}
	if len(other) == 0 {
		return fmt.Sprint(sj.NoFinalAnswer)
	}
	return fmt.Sprintf("%d (%s)", sj.NoFinalAnswer, strings.Join(other, ", "))
}

// fmtConns prints a peak of connections, or "-" when not sampled.
func fmtConns(n int) string {
	if n < 0 {
		return "-"
	}
	return fmt.Sprint(n)
}

// fmtRatio prints a ratio, or "-".
func fmtRatio(r *float64) string {
	if r == nil {
		return "-"
	}
	return fmt.Sprintf("%.2fx", *r)
}
