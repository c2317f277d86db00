package store_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/devtools/storetest"
	"github.com/quorumlock/quorumlock/devtools/testbed"
	"github.com/quorumlock/quorumlock/devtools/testbed/bedtest"
	"github.com/quorumlock/quorumlock/fencing"
	"github.com/quorumlock/quorumlock/orders/request"
	"github.com/quorumlock/quorumlock/orders/store"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// pgServer is the bed's Postgres, which hands out fresh databases.
type pgServer = *testbed.PostgresNode

// env is one migrated database with a store on it.
type env struct {
	dsn   string
	pool  *pgxpool.Pool
	st    *store.Store
	fence *fencing.Issuer
}

func newEnv(t *testing.T, srv pgServer) *env {
	t.Helper()
	db := storetest.New(t, srv)
	iss, err := fencing.NewIssuer(db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	return &env{dsn: db.DSN, pool: db.Pool, st: db.Store, fence: iss}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// nextFence takes a token for the product's stock lock key. It may run on
// any goroutine: a failure is reported with t.Error and gives fence 0, which
// PlaceOrder then refuses.
func (e *env) nextFence(t *testing.T, productID string) int64 {
	t.Helper()
	f, err := e.fence.Next(context.Background(), "stock:"+productID)
	if err != nil {
		t.Errorf("next fence: %v", err)
	}
	return f
}

func (e *env) seed(t *testing.T, productID string, available, price int64) {
	t.Helper()
	if err := e.st.SeedProduct(context.Background(), productID, available, price); err != nil {
		t.Fatal(err)
	}
}

func (e *env) stock(t *testing.T, productID string) store.Stock {
	t.Helper()
	s, err := e.st.Stock(context.Background(), productID)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (e *env) count(t *testing.T, table string) int {
	t.Helper()
	var n int
	if err := e.pool.QueryRow(context.Background(), "SELECT count(*) FROM "+pgx.Identifier{table}.Sanitize()).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// req is the standard request of the seed scenario: u1001 buys one unit of
// product 42 with key req-001. It has no order id or snapshots: put gives
// each attempt its own, as the service does.
func (e *env) req(t *testing.T) placeOrder {
	return placeOrder{
		UserID:         "u1001",
		IdempotencyKey: request.MustKey("req-001"),
		Fingerprint:    "fp-42x1",
		ProductID:      "42",
		Quantity:       1,
		Fence:          e.nextFence(t, "42"),
	}
}

// put runs PlaceOrder as one attempt of the service would: with a new
// order id and both answers rendered, unless p brings its own.
func (e *env) put(ctx context.Context, p placeOrder) (store.Outcome, error) {
	if p.OrderID == "" {
		var b [16]byte
		_, _ = rand.Read(b[:])
		p.OrderID = "ord_" + hex.EncodeToString(b[:])
		if p.Created.Status == 0 {
			p.Created = store.Snapshot{Status: http.StatusCreated, Body: fmt.Appendf(nil,
				`{"orderId":%q,"status":"CREATED","productId":%q,"quantity":%d}`, p.OrderID, p.ProductID, p.Quantity)}
		}
	}
	if p.OutOfStock.Status == 0 {
		p.OutOfStock = store.Snapshot{Status: http.StatusConflict, Body: fmt.Appendf(nil,
			`{"title":"Out of stock","status":409,"productId":%q}`, p.ProductID)}
	}
	return placeOne(ctx, e.st, p)
}

// full is req with an order id and both snapshots: a complete input.
func (e *env) full(t *testing.T) placeOrder {
	p := e.req(t)
	p.OrderID = "ord_full"
	p.Created = store.Snapshot{Status: http.StatusCreated, Body: []byte(`{}`)}
	p.OutOfStock = store.Snapshot{Status: http.StatusConflict, Body: []byte(`{}`)}
	return p
}

// place places an order that must succeed.
func (e *env) place(t *testing.T, p placeOrder) store.Outcome {
	t.Helper()
	out, err := e.put(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestPostgres runs every test that needs a real server on one bed; each
// subtest gets its own database.
func TestPostgres(t *testing.T) {
	srv := startPostgres(t)
	t.Run("Migrate", func(t *testing.T) { testMigrate(t, srv) })
	t.Run("PlaceOrder", func(t *testing.T) { testPlaceOrder(t, srv) })
	t.Run("PlaceBatch", func(t *testing.T) { testPlaceBatch(t, srv) })
	t.Run("PlaceCart", func(t *testing.T) { testPlaceCart(t, srv) })
	t.Run("Lookup", func(t *testing.T) { testLookup(t, srv) })
	t.Run("Products", func(t *testing.T) { testProducts(t, srv) })
	t.Run("Transitions", func(t *testing.T) { testTransitions(t, srv) })
	t.Run("Payments", func(t *testing.T) { testPayments(t, srv) })
	t.Run("StockComesBack", func(t *testing.T) { testStockComesBack(t, srv) })
}

func testMigrate(t *testing.T, srv pgServer) {
	t.Run("TwiceIsANoop", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, srv) // migrated once
		ctx := ctxT(t)
		e.seed(t, "42", 3, 100)
		v, err := store.MigrateDSN(ctx, e.dsn)
		if err != nil {
			t.Fatal(err)
		}
		if v < 2 {
			t.Fatalf("schema version %d", v)
		}
		if s := e.stock(t, "42"); s.Available != 3 {
			t.Fatalf("second migration changed data: %+v", s)
		}
		for _, table := range []string{"product_stock", "orders", "request_outcomes", "payments", "fence_counters"} {
			_ = e.count(t, table)
		}
	})

	t.Run("ConcurrentProcesses", func(t *testing.T) {
		t.Parallel()
		dsn := bedtest.NewDatabase(t, srv)
		ctx := ctxT(t)
		versions := make([]int64, 4)
		errs := make([]error, 4)
		var wg sync.WaitGroup
		for i := range versions {
			wg.Go(func() { versions[i], errs[i] = store.MigrateDSN(ctx, dsn) })
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		for _, v := range versions {
			if v != versions[0] || v < 2 {
				t.Fatalf("versions %v", versions)
			}
		}
	})

	t.Run("BadInput", func(t *testing.T) {
		ctx := ctxT(t)
		if _, err := store.MigrateDSN(ctx, "postgres://%zz"); !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("bad DSN: %v", err)
		}
		if _, err := store.Migrate(ctx, nil); !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("nil db: %v", err)
		}
	})
}

func TestFenceCountersMigrationIsFencingSchema(t *testing.T) {
	b, err := fs.ReadFile(store.Migrations(), "00001_fence_counters.sql")
	if err != nil {
		t.Fatal(err)
	}
	norm := func(s string) string { return strings.Join(strings.Fields(s), " ") }
	if !strings.Contains(norm(string(b)), norm(fencing.Schema)) {
		t.Fatalf("migration does not contain fencing.Schema verbatim:\n%s", b)
	}
}

func testPlaceOrder(t *testing.T, srv pgServer) {
	t.Run("CreatesOrderAndSnapshot", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, srv)
		e.seed(t, "42", 5, 1999)
		p := e.req(t)
		p.Quantity = 2
		out := e.place(t, p)
		if out.Kind != store.OutcomeOrder || out.Replayed {
			t.Fatalf("outcome %+v", out)
		}
		o := out.Order
		if !strings.HasPrefix(o.ID, "ord_") || len(o.ID) != 4+32 {
			t.Fatalf("order id %q", o.ID)
		}
		if o.Status != store.StatusCreated || o.AmountCents != 2*1999 || o.Fence != p.Fence || o.UserID != "u1001" {
			t.Fatalf("order %+v", o)
		}
		want := fmt.Sprintf(`{"orderId":%q,"status":"CREATED","productId":"42","quantity":2}`, o.ID)
		if out.ResponseStatus != http.StatusCreated || string(out.ResponseBody) != want {
			t.Fatalf("snapshot %d %s, want 201 %s", out.ResponseStatus, out.ResponseBody, want)
		}
		if s := e.stock(t, "42"); s.Available != 3 || s.LastFence != p.Fence {
			t.Fatalf("stock %+v", s)
		}
		got, err := e.st.GetOrder(context.Background(), o.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.ID != o.ID || got.Fingerprint != p.Fingerprint || !got.CreatedAt.Equal(o.CreatedAt) {
			t.Fatalf("GetOrder %+v, placed %+v", got, o)
		}
	})

	t.Run("ReplaySameFingerprint", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, srv)
		e.seed(t, "42", 5, 100)
		first := e.place(t, e.req(t))
		again := e.place(t, e.req(t)) // a retry takes a new lease, so a new fence
		if !again.Replayed || again.Order.ID != first.Order.ID {
			t.Fatalf("replay %+v, first %+v", again, first)
		}
		if again.ResponseStatus != first.ResponseStatus || !bytes.Equal(again.ResponseBody, first.ResponseBody) {
			t.Fatalf("replayed snapshot %d %s, first %d %s", again.ResponseStatus, again.ResponseBody, first.ResponseStatus, first.ResponseBody)
		}
		if s := e.stock(t, "42"); s.Available != 4 {
			t.Fatalf("stock %d after a replay, want 4", s.Available)
		}
		// A replay needs no valid fence: even an old one gets the answer.
		old := e.req(t)
		old.Fence = 1
		if out := e.place(t, old); out.Order.ID != first.Order.ID {
			t.Fatalf("replay with an old fence: %+v", out)
		}
	})

	t.Run("FingerprintMismatch", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, srv)
		e.seed(t, "42", 5, 100)
		e.place(t, e.req(t))
		p := e.req(t)
		p.Fingerprint, p.Quantity = "fp-42x2", 2
		_, err := e.put(context.Background(), p)
		if !errors.Is(err, store.ErrFingerprintMismatch) {
			t.Fatalf("err %v, want ErrFingerprintMismatch", err)
		}
		if s := e.stock(t, "42"); s.Available != 4 {
			t.Fatalf("stock %d, want 4", s.Available)
		}
		if n := e.count(t, "orders"); n != 1 {
			t.Fatalf("%d orders", n)
		}
	})

	t.Run("FiftyConcurrentTwins", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, srv)
		e.seed(t, "42", 100, 100)
		placeTwins(t, e, 50)
	})

	t.Run("TwinsQueuedBehindTheStockRow", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, srv)
		e.seed(t, "42", 100, 100)
		queuedTwins(t, e, 8)
	})

	t.Run("TwinsWithoutTheAdvisoryLock", func(t *testing.T) {
		t.Parallel()
		// The unique constraint alone must still give one order: every
		// loser takes the stock, fails to insert, rolls back and replays.
		e := newEnv(t, srv)
		store.DisableTwinLock(e.st)
		e.seed(t, "42", 100, 100)
		queuedTwins(t, e, 8)
	})

	t.Run("DifferentUsersSameKey", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, srv)
		e.seed(t, "42", 5, 100)
		a := e.req(t)
		b := e.req(t)
		b.UserID = "u2002"
		oa, ob := e.place(t, a), e.place(t, b)
		if oa.Replayed || ob.Replayed || oa.Order.ID == ob.Order.ID {
			t.Fatalf("orders %+v and %+v are not independent", oa.Order, ob.Order)
		}
		if s := e.stock(t, "42"); s.Available != 3 {
			t.Fatalf("stock %d, want 3", s.Available)
		}
	})

	t.Run("LastUnitRace", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, srv)
		e.seed(t, "42", 1, 100)
		const users = 20
		type result struct {
			out store.Outcome
			err error
		}
		results := make([]result, users)
		var wg sync.WaitGroup
		for i := range users {
			wg.Go(func() {
				p := e.req(t)
				p.UserID = fmt.Sprintf("u%d", i)
				results[i].out, results[i].err = e.put(context.Background(), p)
			})
		}
		wg.Wait()
		won, lost := 0, 0
		for i, r := range results {
			switch {
			case r.err == nil:
				won++
			case errors.Is(r.err, store.ErrOutOfStock):
				lost++
				if r.out.Kind != store.OutcomeOutOfStock || r.out.ResponseStatus != http.StatusConflict {
					t.Errorf("user %d: rejection outcome %+v", i, r.out)
				}
			case errors.Is(r.err, store.ErrStaleFence):
				// Without the lock, a lower fence arriving after a higher
				// one is refused; the HTTP layer retries with a new fence.
				lost++
			default:
				t.Errorf("user %d: %v", i, r.err)
			}
		}
		if won != 1 || won+lost != users {
			t.Fatalf("%d won, %d lost; want exactly 1 winner", won, lost)
		}
		if s := e.stock(t, "42"); s.Available != 0 {
			t.Fatalf("stock %d, want 0", s.Available)
		}
		if n := e.count(t, "orders"); n != 1 {
			t.Fatalf("%d orders", n)
		}
	})

	t.Run("OutOfStockIsSavedAndReplayed", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, srv)
		e.seed(t, "42", 1, 100)
		p := e.req(t)
		p.Quantity = 2
		out, err := e.put(context.Background(), p)
		if !errors.Is(err, store.ErrOutOfStock) {
			t.Fatalf("err %v, want ErrOutOfStock", err)
		}
		if out.Kind != store.OutcomeOutOfStock || out.Replayed || out.ResponseStatus != http.StatusConflict ||
			!bytes.Contains(out.ResponseBody, []byte(`"status":409`)) {
			t.Fatalf("outcome %+v %s", out, out.ResponseBody)
		}
		if s := e.stock(t, "42"); s.Available != 1 || s.LastFence != 0 {
			t.Fatalf("stock %+v: a rejection must not move stock or fence", s)
		}
		// Restocked since, the same request still gets its first answer.
		e.seed(t, "42", 10, 100)
		p.Fence = e.nextFence(t, "42")
		again, err := e.put(context.Background(), p)
		if !errors.Is(err, store.ErrOutOfStock) || !again.Replayed || !bytes.Equal(again.ResponseBody, out.ResponseBody) {
			t.Fatalf("replay %+v, %v", again, err)
		}
		if n := e.count(t, "orders"); n != 0 {
			t.Fatalf("%d orders", n)
		}
		p.Fingerprint = "other"
		if _, err := e.put(context.Background(), p); !errors.Is(err, store.ErrFingerprintMismatch) {
			t.Fatalf("changed request on a saved rejection: %v", err)
		}
	})

	t.Run("StaleFenceWritesNothing", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, srv)
		e.seed(t, "42", 5, 100)
		old := e.nextFence(t, "42")
		cur := e.req(t) // a later lease
		e.place(t, cur)
		for _, f := range []int64{old, cur.Fence} {
			p := e.req(t)
			p.IdempotencyKey, p.Fence = request.MustKey(fmt.Sprintf("late-%d", f)), f
			out, err := e.put(context.Background(), p)
			if !errors.Is(err, store.ErrStaleFence) || !errors.Is(err, fencing.ErrStaleFence) {
				t.Fatalf("fence %d: %+v, %v; want ErrStaleFence", f, out, err)
			}
			var rej *fencing.RejectedError
			if !errors.As(err, &rej) || rej.Current != cur.Fence {
				t.Fatalf("fence %d: details %+v", f, rej)
			}
		}
		if s := e.stock(t, "42"); s.Available != 4 || s.LastFence != cur.Fence {
			t.Fatalf("stock %+v", s)
		}
		if n, m := e.count(t, "orders"), e.count(t, "request_outcomes"); n != 1 || m != 0 {
			t.Fatalf("%d orders, %d outcomes", n, m)
		}
	})

	t.Run("UnknownProductWritesNothing", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, srv)
		p := e.req(t)
		p.ProductID = "404"
		_, err := e.put(context.Background(), p)
		if !errors.Is(err, store.ErrUnknownProduct) {
			t.Fatalf("err %v, want ErrUnknownProduct", err)
		}
		if n, m := e.count(t, "orders"), e.count(t, "request_outcomes"); n != 0 || m != 0 {
			t.Fatalf("%d orders, %d outcomes", n, m)
		}
	})

	t.Run("InvalidInputWritesNothing", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, srv)
		e.seed(t, "42", 5, 100)
		mods := map[string]func(*placeOrder){
			"noUser":       func(p *placeOrder) { p.UserID = "" },
			"longUser":     func(p *placeOrder) { p.UserID = strings.Repeat("u", request.MaxUserIDLen+1) },
			"noKey":        func(p *placeOrder) { p.IdempotencyKey = request.Key{} },
			"badUTF8":      func(p *placeOrder) { p.UserID = "\xff" },
			"nulUser":      func(p *placeOrder) { p.UserID = "a\x00b" },
			"noFP":         func(p *placeOrder) { p.Fingerprint = "" },
			"noProduct":    func(p *placeOrder) { p.ProductID = "" },
			"longProduct":  func(p *placeOrder) { p.ProductID = strings.Repeat("4", request.MaxIDLen+1) },
			"zeroQty":      func(p *placeOrder) { p.Quantity = 0 },
			"negQty":       func(p *placeOrder) { p.Quantity = -1 },
			"hugeQty":      func(p *placeOrder) { p.Quantity = request.MaxQuantity + 1 },
			"zeroFence":    func(p *placeOrder) { p.Fence = 0 },
			"negFence":     func(p *placeOrder) { p.Fence = -5 },
			"noOrderID":    func(p *placeOrder) { p.OrderID = "" },
			"longOrderID":  func(p *placeOrder) { p.OrderID = strings.Repeat("o", store.MaxRefLen+1) },
			"noCreated":    func(p *placeOrder) { p.Created = store.Snapshot{} },
			"created600":   func(p *placeOrder) { p.Created.Status = 600 },
			"noOutOfStock": func(p *placeOrder) { p.OutOfStock = store.Snapshot{} },
			"outOfStock99": func(p *placeOrder) { p.OutOfStock.Status = 99 },
			"neitherFence": func(p *placeOrder) { p.Fence, p.FenceKey = 0, "" },
		}
		for name, mod := range mods {
			p := e.full(t)
			mod(&p)
			if _, err := placeOne(context.Background(), e.st, p); !errors.Is(err, store.ErrInvalid) {
				t.Errorf("%s: err %v, want ErrInvalid", name, err)
			}
		}
		if s := e.stock(t, "42"); s.Available != 5 || s.LastFence != 0 {
			t.Fatalf("stock %+v", s)
		}
		if n := e.count(t, "orders"); n != 0 {
			t.Fatalf("%d orders", n)
		}
	})

	t.Run("SnapshotsAreData", func(t *testing.T) {
		// The store saves the caller's order id and snapshots byte for
		// byte, whatever they hold, and replays them unchanged.
		t.Parallel()
		e := newEnv(t, srv)
		e.seed(t, "42", 1, 100)
		p := e.req(t)
		p.OrderID = "ord_given"
		p.Created = store.Snapshot{Status: 201, Body: []byte("order ord_given, as rendered")}
		p.OutOfStock = store.Snapshot{Status: 409, Body: []byte("none left, as rendered")}
		out, err := placeOne(context.Background(), e.st, p)
		if err != nil || out.Order.ID != "ord_given" || string(out.ResponseBody) != "order ord_given, as rendered" {
			t.Fatalf("placed %+v %q, %v", out.Order, out.ResponseBody, err)
		}
		again, err := e.put(context.Background(), p)
		if err != nil || !again.Replayed || again.Order.ID != "ord_given" || !bytes.Equal(again.ResponseBody, out.ResponseBody) {
			t.Fatalf("replay %+v %q, %v", again.Order, again.ResponseBody, err)
		}
		q := p
		q.IdempotencyKey, q.OrderID, q.Fence = request.MustKey("req-002"), "ord_other", e.nextFence(t, "42")
		rej, err := placeOne(context.Background(), e.st, q)
		if !errors.Is(err, store.ErrOutOfStock) || rej.ResponseStatus != 409 || string(rej.ResponseBody) != "none left, as rendered" {
			t.Fatalf("rejection %d %q, %v", rej.ResponseStatus, rej.ResponseBody, err)
		}
		if _, err := e.st.GetOrder(context.Background(), "ord_other"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("a rejected request left order ord_other: %v", err)
		}
	})

	t.Run("AmountOverflowWritesNothing", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, srv)
		e.seed(t, "42", 10, 1<<62)
		p := e.req(t)
		p.Quantity = 4
		if _, err := e.put(context.Background(), p); !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("err %v, want ErrInvalid", err)
		}
		if s := e.stock(t, "42"); s.Available != 10 || s.LastFence != 0 {
			t.Fatalf("stock %+v", s)
		}
	})
}

// waitForLockWaiters waits (bounded) until n sessions of the test's
// database are blocked on a lock.
func (e *env) waitForLockWaiters(t *testing.T, n int) {
	t.Helper()
	for i := 0; ; i++ {
		var waiting int
		err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting)
		if err != nil {
			t.Fatal(err)
		}
		if waiting == n {
			return
		}
		if i == 1000 {
			t.Fatalf("%d sessions waiting on a lock, want %d", waiting, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// queuedTwins holds product 42's stock row, starts n identical requests one
// by one with increasing fences so that they queue behind it in fence order,
// then releases the row. Every twin has looked for a saved outcome before
// the first one commits, so none of them can rely on that lookup alone.
func queuedTwins(t *testing.T, e *env, n int) {
	t.Helper()
	ctx := ctxT(t)
	hold, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = hold.Rollback(ctx) }()
	if _, err := hold.Exec(ctx, `SELECT 1 FROM product_stock WHERE product_id = '42' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	outs := make([]store.Outcome, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		p := e.req(t)
		wg.Go(func() { outs[i], errs[i] = e.put(context.Background(), p) })
		e.waitForLockWaiters(t, i+1)
	}
	if err := hold.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	checkTwins(t, e, outs, errs)
}

// placeTwins sends n identical requests at once and checks that exactly
// one order exists, the stock moved once, and everyone got its snapshot.
func placeTwins(t *testing.T, e *env, n int) {
	t.Helper()
	outs := make([]store.Outcome, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			outs[i], errs[i] = e.put(context.Background(), e.req(t))
		})
	}
	wg.Wait()
	for i := range n {
		if errors.Is(errs[i], store.ErrStaleFence) {
			// Twins race with different fences; one that lost the race
			// is refused before it writes, and its retry replays.
			outs[i], errs[i] = e.put(context.Background(), e.req(t))
		}
	}
	checkTwins(t, e, outs, errs)
}

// checkTwins checks that twins got one order, the same answer, and that the
// stock (100 before) moved once.
func checkTwins(t *testing.T, e *env, outs []store.Outcome, errs []error) {
	t.Helper()
	fresh := 0
	for i := range outs {
		if errs[i] != nil {
			t.Fatalf("twin %d: %v", i, errs[i])
		}
		if !outs[i].Replayed {
			fresh++
		}
		if outs[i].Order.ID != outs[0].Order.ID || !bytes.Equal(outs[i].ResponseBody, outs[0].ResponseBody) {
			t.Fatalf("twin %d got %s, twin 0 got %s", i, outs[i].ResponseBody, outs[0].ResponseBody)
		}
	}
	if fresh != 1 {
		t.Fatalf("%d twins created an order, want 1", fresh)
	}
	if got := e.count(t, "orders"); got != 1 {
		t.Fatalf("%d orders", got)
	}
	if s := e.stock(t, "42"); s.Available != 99 {
		t.Fatalf("stock %d, want 99 (decremented once)", s.Available)
	}
}

func testLookup(t *testing.T, srv pgServer) {
	t.Run("OrderAndOutcome", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, srv)
		ctx := ctxT(t)
		e.seed(t, "42", 1, 100)
		placed := e.place(t, e.req(t))
		got, err := e.st.Lookup(ctx, "u1001", request.MustKey("req-001"))
		if err != nil {
			t.Fatal(err)
		}
		if !got.Replayed || got.Kind != store.OutcomeOrder || got.Order.ID != placed.Order.ID ||
			got.Fingerprint != "fp-42x1" || !bytes.Equal(got.ResponseBody, placed.ResponseBody) {
			t.Fatalf("lookup %+v", got)
		}
		p := e.req(t)
		p.IdempotencyKey = request.MustKey("req-002")
		_, _ = e.put(ctx, p)
		got, err = e.st.Lookup(ctx, "u1001", request.MustKey("req-002"))
		if err != nil || got.Kind != store.OutcomeOutOfStock || got.ResponseStatus != http.StatusConflict {
			t.Fatalf("lookup %+v, %v", got, err)
		}
		if _, err := e.st.Lookup(ctx, "u1001", request.MustKey("req-003")); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("unknown key: %v", err)
		}
		if _, err := e.st.Lookup(ctx, "", request.MustKey("req-003")); !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("empty user: %v", err)
		}
	})

	t.Run("WaitsForTransactionInFlight", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, srv)
		ctx := ctxT(t)
		e.seed(t, "42", 1, 100)
		// Stand in for a PlaceOrder that holds the key and has not
		// committed yet: take its advisory lock and insert the order.
		tx, err := e.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('u1001'), hashtext('req-001'))`); err != nil {
			t.Fatal(err)
		}
		_, err = tx.Exec(ctx, `INSERT INTO orders (order_id, user_id, product_id, quantity, amount_cents, idempotency_key,
request_fingerprint, status, response_status, response_body, fence)
VALUES ('ord_inflight', 'u1001', '42', 1, 100, 'req-001', 'fp-42x1', 'CREATED', 201, '\x7b7d', 1)`)
		if err != nil {
			t.Fatal(err)
		}
		type res struct {
			out store.Outcome
			err error
		}
		done := make(chan res, 1)
		go func() {
			out, err := e.st.Lookup(ctx, "u1001", request.MustKey("req-001"))
			done <- res{out, err}
		}()
		e.waitForLockWaiters(t, 1)
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		r := <-done
		if r.err != nil || r.out.Order.ID != "ord_inflight" {
			t.Fatalf("Lookup = %+v, %v; want the order committed while it waited", r.out, r.err)
		}
	})
}

func testProducts(t *testing.T, srv pgServer) {
	t.Parallel()
	e := newEnv(t, srv)
	ctx := ctxT(t)
	e.seed(t, "42", 5, 100)
	e.place(t, e.req(t))
	fence := e.stock(t, "42").LastFence
	// Reseeding resets stock and price but keeps the fence history.
	e.seed(t, "42", 7, 250)
	if s := e.stock(t, "42"); s.Available != 7 || s.PriceCents != 250 || s.LastFence != fence {
		t.Fatalf("stock %+v", s)
	}
	if _, err := e.st.Stock(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Stock(nope): %v", err)
	}
	if _, err := e.st.GetOrder(ctx, "ord_nope"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetOrder(nope): %v", err)
	}
	for _, bad := range []struct {
		id           string
		avail, price int64
	}{{"", 1, 1}, {"x", -1, 1}, {"x", 1, -1}} {
		if err := e.st.SeedProduct(ctx, bad.id, bad.avail, bad.price); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("SeedProduct%v: %v", bad, err)
		}
	}
	if _, err := store.New(nil); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("New(nil): %v", err)
	}
}

// orderIn places a fresh order and walks it to state s along allowed edges.
func (e *env) orderIn(t *testing.T, key string, s store.Status) store.Order {
	t.Helper()
	ctx := context.Background()
	p := e.req(t)
	p.IdempotencyKey = request.MustKey(key)
	o := e.place(t, p).Order
	var path []store.Status
	switch s {
	case store.StatusCreated:
	case store.StatusPaying:
		path = []store.Status{store.StatusPaying}
	case store.StatusPaid, store.StatusPaymentFailed:
		path = []store.Status{store.StatusPaying, s}
	case store.StatusCancelled:
		path = []store.Status{store.StatusCancelled}
	}
	for _, to := range path {
		var err error
		if o, err = e.st.Transition(ctx, o.ID, to); err != nil {
			t.Fatal(err)
		}
	}
	if o.Status != s {
		t.Fatalf("order is %s, want %s", o.Status, s)
	}
	return o
}

var allStatuses = []store.Status{
	store.StatusCreated, store.StatusPaying, store.StatusPaid, store.StatusPaymentFailed, store.StatusCancelled,
}

func testTransitions(t *testing.T, srv pgServer) {
	t.Run("EveryPair", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, srv)
		ctx := ctxT(t)
		e.seed(t, "42", 1000, 100)
		for _, from := range allStatuses {
			for _, to := range allStatuses {
				key := fmt.Sprintf("%s->%s", from, to)
				o := e.orderIn(t, key, from)
				before := e.stock(t, "42").Available
				got, err := e.st.Transition(ctx, o.ID, to)
				after := e.stock(t, "42").Available
				switch {
				case to == store.StatusCreated:
					if !errors.Is(err, store.ErrInvalid) {
						t.Errorf("%s: %v, want ErrInvalid (nothing moves to CREATED)", key, err)
					}
				case store.CanTransition(from, to):
					if err != nil || got.Status != to {
						t.Errorf("%s: %s, %v; want allowed", key, got.Status, err)
					}
				case from == to:
					if err != nil || got.Status != to {
						t.Errorf("%s: %s, %v; want an idempotent success", key, got.Status, err)
					}
				default:
					var te *store.TransitionError
					if !errors.Is(err, store.ErrInvalidTransition) || !errors.As(err, &te) || te.Current != from || te.To != to {
						t.Errorf("%s: %v; want ErrInvalidTransition with current %s", key, err, from)
					}
					if got.Status != from {
						t.Errorf("%s: returned order is %s, want its current state %s", key, got.Status, from)
					}
				}
				if cur, _ := e.st.GetOrder(ctx, o.ID); cur.Status != wantAfter(from, to) {
					t.Errorf("%s: order is %s after the call, want %s", key, cur.Status, wantAfter(from, to))
				}
				wantDelta := int64(0)
				if (from == store.StatusCreated || from == store.StatusPaymentFailed) && to == store.StatusCancelled {
					wantDelta = o.Quantity // the stock of a cancelled order comes back
				}
				if after-before != wantDelta {
					t.Errorf("%s: stock moved by %d, want %d", key, after-before, wantDelta)
				}
			}
		}
	})

	t.Run("ConcurrentCancelRestocksOnce", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, srv)
		e.seed(t, "42", 10, 100)
		p := e.req(t)
		p.Quantity = 3
		o := e.place(t, p).Order
		var wg sync.WaitGroup
		errs := make([]error, 20)
		for i := range errs {
			wg.Go(func() {
				got, err := e.st.Cancel(context.Background(), o.ID)
				if err == nil && got.Status != store.StatusCancelled {
					err = fmt.Errorf("status %s", got.Status)
				}
				errs[i] = err
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		if s := e.stock(t, "42"); s.Available != 10 {
			t.Fatalf("stock %d after 20 cancels, want 10 (restocked once)", s.Available)
		}
		// CANCELLED is never revived.
		if _, err := e.st.Transition(context.Background(), o.ID, store.StatusPaying); !errors.Is(err, store.ErrInvalidTransition) {
			t.Fatalf("pay after cancel: %v", err)
		}
	})

	t.Run("PaidCannotBeCancelled", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, srv)
		e.seed(t, "42", 10, 100)
		o := e.orderIn(t, "k", store.StatusPaid)
		if _, err := e.st.Cancel(context.Background(), o.ID); !errors.Is(err, store.ErrInvalidTransition) {
			t.Fatalf("cancel PAID: %v", err)
		}
		if s := e.stock(t, "42"); s.Available != 9 {
			t.Fatalf("stock %d, want 9", s.Available)
		}
	})

	t.Run("UnknownOrderAndBadInput", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, srv)
		ctx := ctxT(t)
		if _, err := e.st.Transition(ctx, "ord_nope", store.StatusPaid); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("unknown order: %v", err)
		}
		if _, err := e.st.Transition(ctx, "", store.StatusPaid); !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("empty id: %v", err)
		}
		if _, err := e.st.Transition(ctx, "ord_x", "SHIPPED"); !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("unknown state: %v", err)
		}
	})
}

// wantAfter is the state an order in from should be in after asking for to.
func wantAfter(from, to store.Status) store.Status {
	if store.CanTransition(from, to) {
		return to
	}
	return from
}

func TestStatusTable(t *testing.T) {
	allowed := map[[2]store.Status]bool{
		{store.StatusCreated, store.StatusPaying}:          true,
		{store.StatusCreated, store.StatusCancelled}:       true,
		{store.StatusPaying, store.StatusPaid}:             true,
		{store.StatusPaying, store.StatusPaymentFailed}:    true,
		{store.StatusPaymentFailed, store.StatusCancelled}: true,
	}
	for _, from := range append(allStatuses, "", "SHIPPED") {
		for _, to := range append(allStatuses, "", "SHIPPED") {
			if got := store.CanTransition(from, to); got != allowed[[2]store.Status{from, to}] {
				t.Errorf("CanTransition(%q, %q) = %v", from, to, got)
			}
		}
		if from.Valid() != (from != "" && from != "SHIPPED") {
			t.Errorf("%q.Valid() = %v", from, from.Valid())
		}
	}
	for _, s := range allStatuses {
		final := s == store.StatusPaid || s == store.StatusCancelled
		if s.Final() != final {
			t.Errorf("%s.Final() = %v", s, s.Final())
		}
	}
}

func testPayments(t *testing.T, srv pgServer) {
	t.Run("BeginAndSettle", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, srv)
		ctx := ctxT(t)
		e.seed(t, "42", 10, 250)
		o := e.orderIn(t, "k", store.StatusCreated)
		rid := o.ID + ":pay"

		start, err := e.st.BeginPayment(ctx, o.ID, rid)
		if err != nil {
			t.Fatal(err)
		}
		if !start.Started || start.Order.Status != store.StatusPaying || start.Payment.Status != store.PaymentPending ||
			start.Payment.AmountCents != 250 || start.Payment.OrderID != o.ID {
			t.Fatalf("start %+v", start)
		}
		again, err := e.st.BeginPayment(ctx, o.ID, rid)
		if err != nil || again.Started || again.Payment.RequestID != rid {
			t.Fatalf("second begin %+v, %v; want not started", again, err)
		}

		paid, err := e.st.SettlePayment(ctx, rid, store.PaymentSucceeded, "ref-1")
		if err != nil || paid.Status != store.StatusPaid {
			t.Fatalf("settle %+v, %v", paid, err)
		}
		if paid, err = e.st.SettlePayment(ctx, rid, store.PaymentSucceeded, "ref-1"); err != nil || paid.Status != store.StatusPaid {
			t.Fatalf("settle again %+v, %v", paid, err)
		}
		if _, err := e.st.SettlePayment(ctx, rid, store.PaymentFailed, ""); !errors.Is(err, store.ErrPaymentConflict) {
			t.Fatalf("contradicting settle: %v", err)
		}
		p, err := e.st.GetPayment(ctx, rid)
		if err != nil || p.Status != store.PaymentSucceeded || p.ProviderRef != "ref-1" {
			t.Fatalf("payment %+v, %v", p, err)
		}
		var te *store.TransitionError
		if _, err := e.st.BeginPayment(ctx, o.ID, rid); !errors.As(err, &te) || te.Current != store.StatusPaid {
			t.Fatalf("begin on PAID: %v", err)
		}
	})

	t.Run("SettleFailed", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, srv)
		ctx := ctxT(t)
		e.seed(t, "42", 10, 250)
		o := e.orderIn(t, "k", store.StatusCreated)
		if _, err := e.st.BeginPayment(ctx, o.ID, o.ID+":pay"); err != nil {
			t.Fatal(err)
		}
		got, err := e.st.SettlePayment(ctx, o.ID+":pay", store.PaymentFailed, "")
		if err != nil || got.Status != store.StatusPaymentFailed {
			t.Fatalf("%+v, %v", got, err)
		}
	})

	t.Run("BeginOnCancelled", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, srv)
		ctx := ctxT(t)
		e.seed(t, "42", 10, 250)
		o := e.orderIn(t, "k", store.StatusCancelled)
		if _, err := e.st.BeginPayment(ctx, o.ID, o.ID+":pay"); !errors.Is(err, store.ErrInvalidTransition) {
			t.Fatalf("begin on CANCELLED: %v", err)
		}
		if n := e.count(t, "payments"); n != 0 {
			t.Fatalf("%d payments written", n)
		}
	})

	t.Run("PendingAgeLimitAndTouch", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, srv)
		ctx := ctxT(t)
		e.seed(t, "42", 10, 250)
		var ids []string
		for i := range 3 {
			o := e.orderIn(t, fmt.Sprintf("k%d", i), store.StatusCreated)
			if _, err := e.st.BeginPayment(ctx, o.ID, o.ID+":pay"); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, o.ID+":pay")
		}
		// Age the first two by moving their clock back.
		if _, err := e.pool.Exec(ctx, `UPDATE payments SET updated_at = now() - interval '1 hour' WHERE payment_request_id = ANY($1)`, ids[:2]); err != nil {
			t.Fatal(err)
		}
		got, err := e.st.PendingPayments(ctx, time.Minute, 10)
		if err != nil || len(got) != 2 {
			t.Fatalf("pending %+v, %v; want the 2 old ones", got, err)
		}
		if got, _ := e.st.PendingPayments(ctx, time.Minute, 1); len(got) != 1 {
			t.Fatalf("limit 1 gave %d", len(got))
		}
		if got, _ := e.st.PendingPayments(ctx, 0, 10); len(got) != 3 {
			t.Fatalf("age 0 gave %d", len(got))
		}
		if err := e.st.TouchPayment(ctx, got[0].RequestID); err != nil {
			t.Fatal(err)
		}
		if p, _ := e.st.GetPayment(ctx, got[0].RequestID); p.Attempts != 1 {
			t.Fatalf("attempts %d", p.Attempts)
		}
		if got, _ := e.st.PendingPayments(ctx, time.Minute, 10); len(got) != 1 {
			t.Fatalf("after touch: %d old pending, want 1", len(got))
		}
		if _, err := e.st.SettlePayment(ctx, ids[1], store.PaymentSucceeded, "r"); err != nil {
			t.Fatal(err)
		}
		if got, _ := e.st.PendingPayments(ctx, 0, 10); len(got) != 2 {
			t.Fatalf("settled payment still pending: %d", len(got))
		}
		for _, bad := range []struct {
			age time.Duration
			n   int
		}{{-time.Second, 1}, {0, 0}, {0, store.MaxPendingBatch + 1}} {
			if _, err := e.st.PendingPayments(ctx, bad.age, bad.n); !errors.Is(err, store.ErrInvalid) {
				t.Errorf("PendingPayments(%v, %d): %v", bad.age, bad.n, err)
			}
		}
		if _, err := e.st.SettlePayment(ctx, ids[0], store.PaymentPending, ""); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("settle as pending: %v", err)
		}
		if _, err := e.st.SettlePayment(ctx, "nope", store.PaymentSucceeded, ""); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("settle unknown: %v", err)
		}
	})

	t.Run("ClaimIsExclusive", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, srv)
		ctx := ctxT(t)
		e.seed(t, "42", 100, 250)
		const n = 20
		for i := range n {
			o := e.orderIn(t, fmt.Sprintf("c%d", i), store.StatusCreated)
			if _, err := e.st.BeginPayment(ctx, o.ID, o.ID+":pay"); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := e.pool.Exec(ctx, `UPDATE payments SET updated_at = now() - interval '1 hour'`); err != nil {
			t.Fatal(err)
		}
		// Four reconcilers claim at once: every payment goes to one of them.
		var mu sync.Mutex
		seen := map[string]int{}
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				got, err := e.st.ClaimPendingPayments(ctx, time.Minute, 10)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				defer mu.Unlock()
				for _, p := range got {
					seen[p.RequestID]++
					if p.Attempts != 1 {
						t.Errorf("%s: attempts %d after one claim", p.RequestID, p.Attempts)
					}
				}
			})
		}
		wg.Wait()
		if len(seen) != n {
			t.Fatalf("claimed %d distinct payments, want %d", len(seen), n)
		}
		for id, c := range seen {
			if c != 1 {
				t.Fatalf("%s claimed %d times", id, c)
			}
		}
		// A claim restarts the age: nothing is due again within olderThan.
		if got, err := e.st.ClaimPendingPayments(ctx, time.Minute, 100); err != nil || len(got) != 0 {
			t.Fatalf("second round claimed %d, %v", len(got), err)
		}
		if got, err := e.st.ClaimPendingPayments(ctx, 0, 100); err != nil || len(got) != n {
			t.Fatalf("age 0 claimed %d, %v", len(got), err)
		}
		for _, bad := range []struct {
			age time.Duration
			n   int
		}{{-time.Second, 1}, {0, 0}, {0, store.MaxPendingBatch + 1}} {
			if _, err := e.st.ClaimPendingPayments(ctx, bad.age, bad.n); !errors.Is(err, store.ErrInvalid) {
				t.Errorf("ClaimPendingPayments(%v, %d): %v", bad.age, bad.n, err)
			}
		}
	})

	t.Run("CallbackSettlesOnce", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, srv)
		ctx := ctxT(t)
		e.seed(t, "42", 10, 250)
		o := e.orderIn(t, "cb", store.StatusCreated)
		rid := o.ID + ":pay"
		if _, err := e.st.BeginPayment(ctx, o.ID, rid); err != nil {
			t.Fatal(err)
		}
		ev := store.PaymentEvent{EventID: "evt_1", RequestID: rid, Status: store.PaymentSucceeded, ProviderRef: "ch_1"}
		// The same callback delivered ten times at once settles once.
		var applied atomic.Int32
		var wg sync.WaitGroup
		for range 10 {
			wg.Go(func() {
				got, ok, err := e.st.ApplyPaymentEvent(ctx, ev)
				if err != nil || got.Status != store.StatusPaid {
					t.Errorf("apply: %+v, %v", got, err)
				}
				if ok {
					applied.Add(1)
				}
			})
		}
		wg.Wait()
		if applied.Load() != 1 {
			t.Fatalf("applied %d times", applied.Load())
		}
		if n := e.count(t, "payment_events"); n != 1 {
			t.Fatalf("%d events recorded", n)
		}
		// Reordered: a later FAILED for a PAID payment changes nothing.
		late := store.PaymentEvent{EventID: "evt_2", RequestID: rid, Status: store.PaymentFailed}
		if _, _, err := e.st.ApplyPaymentEvent(ctx, late); !errors.Is(err, store.ErrPaymentConflict) {
			t.Fatalf("contradicting event: %v", err)
		}
		// The same id with other content is refused.
		forged := ev
		forged.Status = store.PaymentFailed
		if _, _, err := e.st.ApplyPaymentEvent(ctx, forged); !errors.Is(err, store.ErrEventConflict) {
			t.Fatalf("event id reused: %v", err)
		}
		if _, _, err := e.st.ApplyPaymentEvent(ctx, store.PaymentEvent{EventID: "evt_3", RequestID: "nope:pay", Status: store.PaymentSucceeded}); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("unknown payment: %v", err)
		}
		for _, bad := range []store.PaymentEvent{
			{EventID: "", RequestID: rid, Status: store.PaymentSucceeded},
			{EventID: "evt_4", RequestID: rid, Status: store.PaymentPending},
		} {
			if _, _, err := e.st.ApplyPaymentEvent(ctx, bad); !errors.Is(err, store.ErrInvalid) {
				t.Fatalf("bad event %+v: %v", bad, err)
			}
		}
		if n := e.count(t, "payment_events"); n != 1 {
			t.Fatalf("%d events recorded after the refused ones", n)
		}
		if p, _ := e.st.GetPayment(ctx, rid); p.Status != store.PaymentSucceeded || p.ProviderRef != "ch_1" {
			t.Fatalf("payment %+v", p)
		}
		// An event that agrees with a payment settled by the charge's own
		// reply is recorded and changes nothing.
		o2 := e.orderIn(t, "cb2", store.StatusCreated)
		if _, err := e.st.BeginPayment(ctx, o2.ID, o2.ID+":pay"); err != nil {
			t.Fatal(err)
		}
		if _, err := e.st.SettlePayment(ctx, o2.ID+":pay", store.PaymentSucceeded, "ch_2"); err != nil {
			t.Fatal(err)
		}
		got, ok, err := e.st.ApplyPaymentEvent(ctx, store.PaymentEvent{EventID: "evt_5", RequestID: o2.ID + ":pay", Status: store.PaymentSucceeded, ProviderRef: "ch_2"})
		if err != nil || ok || got.Status != store.StatusPaid {
			t.Fatalf("agreeing event: %+v %v %v", got, ok, err)
		}
	})

	t.Run("OldOutcomesArePurged", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, srv)
		ctx := ctxT(t)
		e.seed(t, "42", 0, 100)
		for _, key := range []string{"old-1", "old-2", "new-1"} {
			p := e.req(t)
			p.IdempotencyKey = request.MustKey(key)
			if _, err := e.put(ctx, p); !errors.Is(err, store.ErrOutOfStock) {
				t.Fatalf("%s: %v", key, err)
			}
		}
		if _, err := e.pool.Exec(ctx, `UPDATE request_outcomes SET created_at = now() - interval '30 days' WHERE idempotency_key LIKE 'old-%'`); err != nil {
			t.Fatal(err)
		}
		n, err := e.st.PurgeOutcomes(ctx, 7*24*time.Hour, 100)
		if err != nil || n != 2 {
			t.Fatalf("purged %d, %v; want the 2 old outcomes", n, err)
		}
		if got := e.count(t, "request_outcomes"); got != 1 {
			t.Fatalf("%d outcomes left, want the recent one", got)
		}
		if n, err := e.st.PurgeOutcomes(ctx, 7*24*time.Hour, 100); err != nil || n != 0 {
			t.Fatalf("second purge %d, %v", n, err)
		}
		for _, bad := range []struct {
			d time.Duration
			n int
		}{{0, 1}, {time.Hour, 0}, {time.Hour, store.MaxPurgeBatch + 1}} {
			if _, err := e.st.PurgeOutcomes(ctx, bad.d, bad.n); !errors.Is(err, store.ErrInvalid) {
				t.Errorf("PurgeOutcomes(%v, %d): %v", bad.d, bad.n, err)
			}
		}
	})
}

// balanced fails unless every product's available units plus the units
// held by orders that are not cancelled equal what was put in.
func (e *env) balanced(t *testing.T, initial map[string]int64) {
	t.Helper()
	bs, err := e.st.StockBalances(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bs {
		if want, ok := initial[b.ProductID]; ok && b.Available+b.Held != want {
			t.Fatalf("product %s: %d available + %d held = %d, want %d", b.ProductID, b.Available, b.Held, b.Available+b.Held, want)
		}
	}
}

func testStockComesBack(t *testing.T, srv pgServer) {
	t.Run("CancelAfterAFailedPayment", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, srv)
		ctx := ctxT(t)
		e.seed(t, "42", 10, 250)
		o := e.orderIn(t, "pf", store.StatusCreated)
		if _, err := e.st.BeginPayment(ctx, o.ID, o.ID+":pay"); err != nil {
			t.Fatal(err)
		}
		if _, err := e.st.SettlePayment(ctx, o.ID+":pay", store.PaymentFailed, ""); err != nil {
			t.Fatal(err)
		}
		before := e.stock(t, "42").Available
		// Cancelled concurrently from several places: restocked once.
		var wg sync.WaitGroup
		for range 5 {
			wg.Go(func() {
				if got, err := e.st.Cancel(ctx, o.ID); err != nil || got.Status != store.StatusCancelled {
					t.Errorf("cancel: %+v, %v", got, err)
				}
			})
		}
		wg.Wait()
		if got := e.stock(t, "42").Available; got != before+o.Quantity {
			t.Fatalf("available %d after cancelling a failed payment, want %d", got, before+o.Quantity)
		}
		e.balanced(t, map[string]int64{"42": 10})
		// PAID and PAYING orders still cannot be cancelled.
		paying := e.orderIn(t, "py", store.StatusCreated)
		if _, err := e.st.BeginPayment(ctx, paying.ID, paying.ID+":pay"); err != nil {
			t.Fatal(err)
		}
		var te *store.TransitionError
		if _, err := e.st.Cancel(ctx, paying.ID); !errors.As(err, &te) || te.Current != store.StatusPaying {
			t.Fatalf("cancel PAYING: %v", err)
		}
	})

	t.Run("UnpaidOrdersExpire", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, srv)
		ctx := ctxT(t)
		e.seed(t, "42", 100, 250)
		const n = 20
		var ids []string
		for i := range n {
			ids = append(ids, e.orderIn(t, fmt.Sprintf("x%d", i), store.StatusCreated).ID)
		}
		fresh := e.orderIn(t, "fresh", store.StatusCreated)
		paid := ids[0] // paid before the hold ran out: it keeps its stock
		if _, err := e.st.BeginPayment(ctx, paid, paid+":pay"); err != nil {
			t.Fatal(err)
		}
		if _, err := e.st.SettlePayment(ctx, paid+":pay", store.PaymentSucceeded, "r"); err != nil {
			t.Fatal(err)
		}
		if _, err := e.pool.Exec(ctx, `UPDATE orders SET created_at = now() - interval '1 hour' WHERE order_id = ANY($1)`, ids); err != nil {
			t.Fatal(err)
		}
		before := e.stock(t, "42").Available
		// Four reapers at once: every expired order is cancelled by one.
		var mu sync.Mutex
		seen := map[string]int{}
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				got, err := e.st.ExpireOrders(ctx, 15*time.Minute, 7)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				defer mu.Unlock()
				for _, o := range got {
					seen[o.ID]++
					if o.Status != store.StatusCancelled {
						t.Errorf("%s: %s", o.ID, o.Status)
					}
				}
			})
		}
		wg.Wait()
		for {
			got, err := e.st.ExpireOrders(ctx, 15*time.Minute, 7)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) == 0 {
				break
			}
			for _, o := range got {
				seen[o.ID]++
			}
		}
		if len(seen) != n-1 {
			t.Fatalf("expired %d orders, want %d", len(seen), n-1)
		}
		for id, c := range seen {
			if c != 1 || id == paid || id == fresh.ID {
				t.Fatalf("%s expired %d times", id, c)
			}
		}
		if got := e.stock(t, "42").Available; got != before+int64(n-1)*fresh.Quantity {
			t.Fatalf("available %d, want %d", got, before+int64(n-1)*fresh.Quantity)
		}
		e.balanced(t, map[string]int64{"42": 100})
		for _, bad := range []struct {
			hold time.Duration
			n    int
		}{{0, 1}, {time.Minute, 0}, {time.Minute, store.MaxExpireBatch + 1}} {
			if _, err := e.st.ExpireOrders(ctx, bad.hold, bad.n); !errors.Is(err, store.ErrInvalid) {
				t.Errorf("ExpireOrders(%v, %d): %v", bad.hold, bad.n, err)
			}
		}
	})

	t.Run("TheBalanceHoldsThroughEveryMove", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, srv)
		ctx := ctxT(t)
		e.seed(t, "42", 50, 250)
		for i := range 12 {
			o := e.orderIn(t, fmt.Sprintf("b%d", i), store.StatusCreated)
			switch i % 4 {
			case 0: // paid
				_, _ = e.st.BeginPayment(ctx, o.ID, o.ID+":pay")
				_, _ = e.st.SettlePayment(ctx, o.ID+":pay", store.PaymentSucceeded, "r")
			case 1: // declined, then cancelled
				_, _ = e.st.BeginPayment(ctx, o.ID, o.ID+":pay")
				_, _ = e.st.SettlePayment(ctx, o.ID+":pay", store.PaymentFailed, "")
				if i%8 == 1 {
					_, _ = e.st.Cancel(ctx, o.ID)
				}
			case 2: // cancelled by the user
				_, _ = e.st.Cancel(ctx, o.ID)
			case 3: // left unpaid, expired
				_, _ = e.pool.Exec(ctx, `UPDATE orders SET created_at = now() - interval '1 hour' WHERE order_id = $1`, o.ID)
			}
			e.balanced(t, map[string]int64{"42": 50})
		}
		if _, err := e.st.ExpireOrders(ctx, time.Minute, 100); err != nil {
			t.Fatal(err)
		}
		e.balanced(t, map[string]int64{"42": 50})
	})
}
