package orders_test

import (
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/quorumlock/quorumlock/orders/request"
)

// updateReplay rewrites testdata/replay.json from the code as it stands:
// run it only on code whose answers are the reference (it was written by
// the code that had two placement paths, before they became one).
var updateReplay = flag.Bool("update-replay", false, "rewrite testdata/replay.json from the current code")

const replayFile = "testdata/replay.json"

// replayTables are the tables that hold a request's saved outcome, in the
// order they are loaded back (an order's lines before the order).
var replayTables = []string{"order_lines", "orders", "request_outcomes"}

// replayCase is one create request and what the code that wrote the
// fixture saved and answered for it.
type replayCase struct {
	Name        string
	User, Key   string
	Body        string
	Fingerprint string
	First       savedReply // the first answer
	Replay      savedReply // the answer to the same request again
	// Rows are the request's rows as Postgres's row_to_json wrote them,
	// by table.
	Rows map[string][]json.RawMessage
}

// savedReply is an answer's status, the headers a replay must repeat, and
// its body.
type savedReply struct {
	Status int
	Header map[string]string
	Body   string
}

var replayHeaders = []string{"Content-Type", "Location", "Idempotent-Replayed", "Retry-After"}

func savedOf(a answer) savedReply {
	h := map[string]string{}
	for _, k := range replayHeaders {
		if v := a.Header.Get(k); v != "" {
			h[k] = v
		}
	}
	return savedReply{Status: a.Status, Header: h, Body: a.Body}
}

// replayRequests are single-product and cart requests, created and out of
// stock, against product 42 (5 units) and 44 (3 units), in this order.
var replayRequests = []replayCase{
	{Name: "single created", User: "replay-u1", Key: "replay-k1", Body: `{"productId":"42","quantity":2,"addressVersion":"v1"}`},
	{Name: "single out of stock", User: "replay-u1", Key: "replay-k2", Body: `{"productId":"42","quantity":4,"addressVersion":"v1"}`},
	{Name: "one-line cart created", User: "replay-u2", Key: "replay-k3", Body: `{"items":[{"productId":"42","quantity":1}],"addressVersion":"v1"}`},
	{Name: "cart created", User: "replay-u2", Key: "replay-k4", Body: `{"items":[{"productId":"42","quantity":1},{"productId":"44","quantity":2}],"addressVersion":"v2"}`},
	{Name: "cart out of stock", User: "replay-u3", Key: "replay-k5", Body: `{"items":[{"productId":"42","quantity":1},{"productId":"44","quantity":9}],"addressVersion":"v1"}`},
	{Name: "single with coupon", User: "replay-u3", Key: "replay-k6", Body: `{"productId":"44","quantity":1,"addressVersion":"v1","couponId":"SPRING"}`},
}

func replayRig(t *testing.T) *rig {
	t.Helper()
	r := newRig(t, 5)
	if err := r.st.SeedProduct(context.Background(), "44", 3, 250); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestReplayFixture checks that what the code with two placement paths
// saved still answers byte for byte: each request's fingerprint is the
// one saved, and with the saved rows loaded into a fresh database, the
// request answers as it did (from Postgres first, then from the Redis
// record that answer completed); and the same requests placed anew answer
// as they did the first time.
func TestReplayFixture(t *testing.T) {
	if *updateReplay {
		writeReplayFixture(t)
	}
	data, err := os.ReadFile(replayFile)
	if err != nil {
		t.Fatal(err)
	}
	var cases []replayCase
	if err := json.Unmarshal(data, &cases); err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		o, err := request.ParseBytes([]byte(c.Body))
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		if fp := o.Fingerprint(); fp != c.Fingerprint {
			t.Errorf("%s: fingerprint %s, saved %s", c.Name, fp, c.Fingerprint)
		}
	}
	r := replayRig(t)
	loadReplayRows(t, r, cases)
	in := r.instance(t)
	for _, c := range cases {
		for _, from := range []string{"postgres", "redis"} {
			got := savedOf(post(t, in, c.User, c.Key, c.Body))
			if !sameReply(got, c.Replay) {
				t.Errorf("%s, replayed from %s:\n got %+v\nwant %+v", c.Name, from, got, c.Replay)
			}
		}
	}
	// The same requests under new keys meet the same stock (the loaded
	// rows took none), so they answer as the first time, but for the new
	// order's id.
	for _, c := range cases {
		got := savedOf(post(t, in, c.User, c.Key+"-again", c.Body))
		if a, b := withoutOrderID(got), withoutOrderID(c.First); !sameReply(a, b) {
			t.Errorf("%s, placed again:\n got %+v\nwant %+v", c.Name, a, b)
		}
	}
}

var orderIDPattern = regexp.MustCompile(`ord_[0-9a-f]{32}`)

// withoutOrderID is r with every order id replaced by one placeholder.
func withoutOrderID(r savedReply) savedReply {
	h := map[string]string{}
	for k, v := range r.Header {
		h[k] = orderIDPattern.ReplaceAllString(v, "ord_ID")
	}
	return savedReply{Status: r.Status, Header: h, Body: orderIDPattern.ReplaceAllString(r.Body, "ord_ID")}
}

func sameReply(a, b savedReply) bool {
	if a.Status != b.Status || a.Body != b.Body || len(a.Header) != len(b.Header) {
		return false
	}
	for k, v := range a.Header {
		if b.Header[k] != v {
			return false
		}
	}
	return true
}

// loadReplayRows inserts the saved rows of cases in one transaction.
func loadReplayRows(t *testing.T, r *rig, cases []replayCase) {
	t.Helper()
	ctx := context.Background()
	tx, err := r.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	for _, table := range replayTables {
		for _, c := range cases {
			for _, row := range c.Rows[table] {
				_, err := tx.Exec(ctx, `INSERT INTO `+table+` SELECT * FROM json_populate_record(NULL::`+table+`, $1::json)`, string(row))
				if err != nil {
					t.Fatalf("%s: load %s: %v", c.Name, table, err)
				}
			}
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// writeReplayFixture places every request of replayRequests with the
// current code, twice, and writes what it saved and answered.
func writeReplayFixture(t *testing.T) {
	t.Helper()
	r := replayRig(t)
	in := r.instance(t)
	ctx := context.Background()
	cases := make([]replayCase, len(replayRequests))
	for i, c := range replayRequests {
		o, err := request.ParseBytes([]byte(c.Body))
		if err != nil {
			t.Fatal(err)
		}
		c.Fingerprint = o.Fingerprint()
		c.First = savedOf(post(t, in, c.User, c.Key, c.Body))
		c.Replay = savedOf(post(t, in, c.User, c.Key, c.Body))
		c.Rows = map[string][]json.RawMessage{}
		queries := map[string]string{
			"orders":           `SELECT row_to_json(o)::text FROM orders o WHERE user_id = $1 AND idempotency_key = $2`,
			"order_lines":      `SELECT row_to_json(l)::text FROM order_lines l JOIN orders o USING (order_id) WHERE o.user_id = $1 AND o.idempotency_key = $2 ORDER BY l.product_id`,
			"request_outcomes": `SELECT row_to_json(x)::text FROM request_outcomes x WHERE user_id = $1 AND idempotency_key = $2`,
		}
		for _, table := range replayTables {
			rows, err := r.pool.Query(ctx, queries[table], c.User, c.Key)
			if err != nil {
				t.Fatal(err)
			}
			for rows.Next() {
				var s string
				if err := rows.Scan(&s); err != nil {
					t.Fatal(err)
				}
				c.Rows[table] = append(c.Rows[table], json.RawMessage(s))
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
		}
		cases[i] = c
	}
	data, err := json.MarshalIndent(cases, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(replayFile), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(replayFile, append(data, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
}
