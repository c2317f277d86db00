package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/quorumlock/quorumlock/devtools/testbed"
)

// maxEvents bounds how many of the monitor's events one reading returns.
const maxEvents = 1000

// noPrimary is how a run records that the monitor named no primary.
const noPrimary = "none"

// mainDSN returns the DSN of the bed's main database where the runs are
// made: on the single Postgres, or on the HA group, reached as -ha-clients
// says.
func (b *bench) mainDSN(where string) (string, error) {
	if where == pgSingle {
		return b.bed.Postgres.DSN(), nil
	}
	g := b.bed.PostgresHA
	if b.cfg.haClients == haViaProxy {
		return g.URI(), nil
	}
	direct := map[string]string{}
	for _, n := range g.Nodes {
		direct[n.Addr()] = n.DirectAddr()
	}
	return replaceHosts(g.URI(), direct)
}

// splitURL cuts a postgres:// URL into what comes before its hosts, the
// comma-separated hosts, its path (from the "/" on, or "") and its query
// (from the "?" on, or ""). It does not use net/url, which refuses a
// multi-host URL.
func splitURL(dsn string) (head, hosts, path, query string, err error) {
	i := strings.Index(dsn, "://")
	if i < 0 {
		return "", "", "", "", fmt.Errorf("database URL %q: no scheme", redactURL(dsn))
	}
	rest := dsn[i+3:]
	authEnd := strings.IndexAny(rest, "/?")
	if authEnd < 0 {
		authEnd = len(rest)
	}
	auth := rest[:authEnd]
	at := strings.LastIndexByte(auth, '@')
	head, hosts = dsn[:i+3]+auth[:at+1], auth[at+1:]
	rest = rest[authEnd:]
	q := strings.IndexByte(rest, '?')
	if q < 0 {
		q = len(rest)
	}
	return head, hosts, rest[:q], rest[q:], nil
}

// withDatabase returns dsn with its database (its path) replaced by name.
func withDatabase(dsn, name string) (string, error) {
	head, hosts, _, query, err := splitURL(dsn)
	if err != nil {
		return "", err
	}
	return head + hosts + "/" + name + query, nil
}

// replaceHosts returns dsn with each of its hosts that to maps replaced;
// every host of to must be there.
func replaceHosts(dsn string, to map[string]string) (string, error) {
	head, hosts, path, query, err := splitURL(dsn)
	if err != nil {
		return "", err
	}
	list := strings.Split(hosts, ",")
	done := 0
	for i, h := range list {
		if r, ok := to[h]; ok {
			list[i] = r
			done++
		}
	}
	if done != len(to) {
		return "", fmt.Errorf("database URL %q: %d of the %d hosts to replace found", redactURL(dsn), done, len(to))
	}
	return head + strings.Join(list, ",") + path + query, nil
}

// redactURL hides the password of a database URL, for messages and the
// report.
func redactURL(dsn string) string {
	i := strings.Index(dsn, "://")
	if i < 0 {
		return dsn
	}
	rest := dsn[i+3:]
	authEnd := strings.IndexAny(rest, "/?")
	if authEnd < 0 {
		authEnd = len(rest)
	}
	at := strings.LastIndexByte(rest[:authEnd], '@')
	colon := strings.IndexByte(rest[:max(at, 0)], ':')
	if at < 0 || colon < 0 {
		return dsn
	}
	return dsn[:i+3] + rest[:colon] + ":xxxxx" + rest[at:]
}

// haWatch follows the HA group over the runs: the primary and the last of
// the monitor's events before the first run, to tell what the monitor
// logged during the runs.
type haWatch struct {
	g *testbed.PostgresGroup
	// primary is the primary's name before the first run.
	primary string
	// mark is the time of the monitor's last event before the first run.
	mark time.Time
	// before are the monitor's last events before the first run.
	before []testbed.Event
}

// watchHA reads the group's primary and its monitor's last events.
func watchHA(ctx context.Context, g *testbed.PostgresGroup) (*haWatch, error) {
	p, err := g.Primary(ctx)
	if err != nil {
		return nil, fmt.Errorf("the HA group before the runs: %w", err)
	}
	ev, err := g.Events(ctx, maxEvents)
	if err != nil {
		return nil, err
	}
	w := &haWatch{g: g, primary: p.Name(), before: ev}
	if len(ev) > 0 {
		w.mark = ev[len(ev)-1].Time
	}
	return w, nil
}

// haPrimary returns the name of the HA group's primary ("" without the
// group; noPrimary while the monitor names none).
func (b *bench) haPrimary(ctx context.Context) (string, error) {
	if b.ha == nil {
		return "", nil
	}
	n, err := b.ha.g.Primary(ctx)
	switch {
	case errors.Is(err, testbed.ErrNoPrimary):
		return noPrimary, nil
	case err != nil:
		return "", err
	}
	return n.Name(), nil
}

// haJSON is the HA group over the runs: how the instances reached it,
// its primary before the first run and after the last, and every event
// its monitor logged in between (the last events before, for context).
type haJSON struct {
	Clients        string      `json:"clients"`
	URI            string      `json:"uri"`
	PrimaryAtStart string      `json:"primary_at_start"`
	PrimaryAtEnd   string      `json:"primary_at_end"`
	EventsBefore   []eventJSON `json:"events_before"`
	EventsDuring   []eventJSON `json:"events_during"`
}

// eventJSON is one of the monitor's events.
type eventJSON struct {
	Time        time.Time `json:"time"`
	Node        string    `json:"node"`
	Reported    string    `json:"reported"`
	Assigned    string    `json:"assigned"`
	Description string    `json:"description"`
}

// summary reads the group's primary and the events since the first run.
func (w *haWatch) summary(ctx context.Context, cfg config, dsn string) (*haJSON, error) {
	h := &haJSON{Clients: cfg.haClients, URI: redactURL(dsn), PrimaryAtStart: w.primary, PrimaryAtEnd: noPrimary,
		EventsBefore: []eventJSON{}, EventsDuring: []eventJSON{}}
	p, err := w.g.Primary(ctx)
	switch {
	case err == nil:
		h.PrimaryAtEnd = p.Name()
	case !errors.Is(err, testbed.ErrNoPrimary):
		return nil, fmt.Errorf("the HA group after the runs: %w", err)
	}
	ev, err := w.g.Events(ctx, maxEvents)
	if err != nil {
		return nil, fmt.Errorf("the HA group after the runs: %w", err)
	}
	for _, e := range ev {
		if e.Time.After(w.mark) {
			h.EventsDuring = append(h.EventsDuring, eventJSON(e))
		}
	}
	for _, e := range w.before[max(0, len(w.before)-5):] {
		h.EventsBefore = append(h.EventsBefore, eventJSON(e))
	}
	return h, nil
}

// postgresComparisonJSON compares one closed-loop run on the single
// Postgres with the same run on the HA group: orders/s and p99 on each,
// and HAOverSingle, the HA group's orders/s over the single one's (absent
// when the single one placed none).
type postgresComparisonJSON struct {
	Name                string   `json:"name"`
	Mode                string   `json:"mode"`
	Backend             string   `json:"backend,omitempty"`
	SingleCreatedPerSec float64  `json:"single_created_per_sec"`
	HACreatedPerSec     float64  `json:"ha_created_per_sec"`
	HAOverSingle        *float64 `json:"ha_over_single,omitempty"`
	SingleP99Ns         int64    `json:"single_p99_ns"`
	HAP99Ns             int64    `json:"ha_p99_ns"`
}

// comparePostgres pairs every closed-loop run on the single Postgres with
// the same run on the HA group, in the order of the runs.
func comparePostgres(runs []runJSON) []postgresComparisonJSON {
	key := func(r runJSON) string { return r.Name + " " + runLabel(runJSON{Mode: r.Mode, Backend: r.Backend}) }
	ha := map[string]runJSON{}
	for _, r := range runs {
		if isClosedLoop(r.Scenario) && r.Postgres == pgHA {
			ha[key(r)] = r
		}
	}
	var out []postgresComparisonJSON
	for _, r := range runs {
		h, ok := ha[key(r)]
		if !isClosedLoop(r.Scenario) || r.Postgres != pgSingle || !ok {
			continue
		}
		c := postgresComparisonJSON{Name: r.Name, Mode: r.Mode, Backend: r.Backend, SingleCreatedPerSec: r.CreatedPerSec,
			HACreatedPerSec: h.CreatedPerSec, SingleP99Ns: r.Latency201.P99ns, HAP99Ns: h.Latency201.P99ns}
		if r.CreatedPerSec > 0 {
			c.HAOverSingle = new(h.CreatedPerSec / r.CreatedPerSec)
		}
		out = append(out, c)
	}
	return out
}

// reportPostgres prints, for every closed-loop scenario and lock backend
// that ran on both databases in both modes, the orders/s side by side:
// each mode on each database, lock over db on each, and the HA group over
// the single Postgres in each mode.
func reportPostgres(out io.Writer, s summaryJSON) {
	byKey := map[string]map[string]comparisonJSON{}
	var keys []string
	for _, c := range s.Comparisons {
		k := c.Name + " " + c.Backend
		if byKey[k] == nil {
			byKey[k] = map[string]comparisonJSON{}
			keys = append(keys, k)
		}
		byKey[k][c.Postgres] = c
	}
	var rows []string
	for _, k := range keys {
		single, ok1 := byKey[k][pgSingle]
		ha, ok2 := byKey[k][pgHA]
		if !ok1 || !ok2 {
			continue
		}
		rows = append(rows, fmt.Sprintf("| %s | %s | %.0f | %.0f | %s | %.0f | %.0f | %s | %s | %s |", single.Name, modeLabel(modeLock, single.Backend),
			single.LockCreatedPerSec, single.DBCreatedPerSec, fmtRate(single.LockCreatedPerSec, single.DBCreatedPerSec),
			ha.LockCreatedPerSec, ha.DBCreatedPerSec, fmtRate(ha.LockCreatedPerSec, ha.DBCreatedPerSec),
			fmtRate(ha.LockCreatedPerSec, single.LockCreatedPerSec), fmtRate(ha.DBCreatedPerSec, single.DBCreatedPerSec)))
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintln(out)
	fmt.Fprintln(out, "Single Postgres against the HA group (a primary and a synchronous standby), orders/s of the table above:")
	fmt.Fprintln(out)
	fmt.Fprintln(out, "| scenario | lock | lock, single | db, single | lock/db, single | lock, ha | db, ha | lock/db, ha | ha/single, lock | ha/single, db |")
	fmt.Fprintln(out, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range rows {
		fmt.Fprintln(out, r)
	}
}

// fmtRate prints a/b as a ratio, or "-" when b is not positive.
func fmtRate(a, b float64) string {
	if b <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", a/b)
}

// reportHA prints the HA group's primary before and after the runs, and
// the monitor's events during them.
func reportHA(out io.Writer, s summaryJSON) {
	h := s.HA
	if h == nil {
		return
	}
	fmt.Fprintln(out)
	fmt.Fprintf(out, "HA group: instances reached it %s (%s); primary before the first run %s, after the last %s.\n",
		map[string]string{haViaProxy: "through the bed's proxies", haDirect: "at the nodes' own addresses"}[h.Clients], h.URI,
		h.PrimaryAtStart, h.PrimaryAtEnd)
	if len(h.EventsDuring) == 0 {
		fmt.Fprintln(out, "The monitor logged no event during the runs. Its last events before them:")
	} else {
		fmt.Fprintf(out, "The monitor logged %d events during the runs:\n", len(h.EventsDuring))
	}
	events := h.EventsDuring
	if len(events) == 0 {
		events = h.EventsBefore
	}
	for _, e := range events {
		fmt.Fprintf(out, "- %s %s %s/%s: %s\n", e.Time.Format(time.RFC3339Nano), e.Node, e.Reported, e.Assigned, e.Description)
	}
	for _, r := range s.Runs {
		if r.PrimaryBefore != r.PrimaryAfter || r.PrimaryBefore == noPrimary {
			fmt.Fprintf(out, "%s/%s: the primary was %s before the run and %s after it.\n", r.Name, runLabel(r), r.PrimaryBefore, r.PrimaryAfter)
		}
	}
}
