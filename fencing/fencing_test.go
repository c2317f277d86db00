package fencing_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/devtools/testbed"
	"github.com/quorumlock/quorumlock/devtools/testbed/bedtest"
	"github.com/quorumlock/quorumlock/fencing"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// pgServer is the bed's Postgres, which hands out fresh databases.
type pgServer = *testbed.PostgresNode

const stockDDL = `CREATE TABLE stock (
    id         text PRIMARY KEY,
    available  bigint NOT NULL CHECK (available >= 0),
    last_fence bigint NOT NULL DEFAULT 0,
    note       text
)`

// newDB returns a pool on a fresh database holding fence_counters and a
// stock table.
func newDB(t *testing.T, srv pgServer) (*pgxpool.Pool, string) {
	t.Helper()
	db := bedtest.Migrated(t, srv, schema)
	return db.Pool, db.DSN
}

// schema is the testbed.Setup of these tests: fence_counters and stock.
func schema(ctx context.Context, dsn string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	if err := fencing.EnsureSchema(ctx, conn); err != nil {
		return err
	}
	_, err = conn.Exec(ctx, stockDDL)
	return err
}

func openPool(t *testing.T, dsn string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 16
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestPostgres runs every test that needs a real server on one bed; each
// subtest gets its own database.
func TestPostgres(t *testing.T) {
	srv := startPostgres(t)
	t.Run("Issuer", func(t *testing.T) { testIssuer(t, srv) })
	t.Run("FencedWrite", func(t *testing.T) { testFencedWrite(t, srv) })
	t.Run("Claim", func(t *testing.T) { testClaim(t, srv) })
	t.Run("Reserver", func(t *testing.T) { testReserver(t, srv) })
}

func testIssuer(t *testing.T, srv pgServer) {
	t.Run("StrictlyIncreasingUnderConcurrency", func(t *testing.T) {
		t.Parallel()
		pool, _ := newDB(t, srv)
		ctx := ctxT(t)
		iss, err := fencing.NewIssuer(pool)
		if err != nil {
			t.Fatal(err)
		}
		const workers, per = 8, 50
		got := make([][]int64, workers)
		errs := make([]error, workers)
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				for range per {
					v, err := iss.Next(ctx, "stock:42")
					if err != nil {
						errs[w] = err
						return
					}
					got[w] = append(got[w], v)
				}
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		var all []int64
		for w, vs := range got {
			// Each caller sees its own tokens strictly increase.
			for i := 1; i < len(vs); i++ {
				if vs[i] <= vs[i-1] {
					t.Fatalf("worker %d: token %d after %d", w, vs[i], vs[i-1])
				}
			}
			all = append(all, vs...)
		}
		// Across callers, every token is handed out exactly once: 1..400.
		slices.Sort(all)
		if len(all) != workers*per {
			t.Fatalf("got %d tokens, want %d", len(all), workers*per)
		}
		for i, v := range all {
			if v != int64(i+1) {
				t.Fatalf("sorted tokens[%d] = %d, want %d (duplicate or gap)", i, v, i+1)
			}
		}
	})

	t.Run("IndependentKeys", func(t *testing.T) {
		t.Parallel()
		pool, _ := newDB(t, srv)
		ctx := ctxT(t)
		iss, _ := fencing.NewIssuer(pool)
		for i := 1; i <= 3; i++ {
			a, err := iss.Next(ctx, "stock:a")
			if err != nil {
				t.Fatal(err)
			}
			if a != int64(i) {
				t.Fatalf("stock:a token %d, want %d", a, i)
			}
		}
		b, err := iss.Next(ctx, "stock:b")
		if err != nil {
			t.Fatal(err)
		}
		if b != 1 {
			t.Fatalf("stock:b first token %d, want 1 (keys must not share a counter)", b)
		}
	})

	t.Run("DurableAcrossPools", func(t *testing.T) {
		t.Parallel()
		pool, dsn := newDB(t, srv)
		ctx := ctxT(t)
		iss, _ := fencing.NewIssuer(pool)
		var last int64
		for range 5 {
			v, err := iss.Next(ctx, "stock:42")
			if err != nil {
				t.Fatal(err)
			}
			last = v
		}
		pool.Close()

		pool2 := openPool(t, dsn)
		iss2, _ := fencing.NewIssuer(pool2)
		v, err := iss2.Next(ctx, "stock:42")
		if err != nil {
			t.Fatal(err)
		}
		if v != last+1 {
			t.Fatalf("after reopening: token %d, want %d", v, last+1)
		}
	})

	t.Run("RollbackDoesNotReissueCommitted", func(t *testing.T) {
		t.Parallel()
		pool, _ := newDB(t, srv)
		ctx := ctxT(t)
		iss, _ := fencing.NewIssuer(pool)
		first, err := iss.Next(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		txIss, _ := fencing.NewIssuer(tx)
		if _, err := txIss.Next(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		v, err := iss.Next(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		if v <= first {
			t.Fatalf("token %d after committed %d", v, first)
		}
	})

	t.Run("RejectsBadKeys", func(t *testing.T) {
		t.Parallel()
		pool, _ := newDB(t, srv)
		ctx := ctxT(t)
		iss, _ := fencing.NewIssuer(pool)
		for name, key := range map[string]string{
			"empty":   "",
			"long":    strings.Repeat("k", fencing.MaxKeyLen+1),
			"notUTF8": "stock:\xff",
			"NUL":     "stock:\x00",
		} {
			v, err := iss.Next(ctx, key)
			if !errors.Is(err, fencing.ErrInvalid) {
				t.Errorf("%s: Next = %d, %v; want ErrInvalid", name, v, err)
			}
		}
		var n int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM fence_counters").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Fatalf("%d counters written for rejected keys", n)
		}
		if _, err := iss.Next(ctx, strings.Repeat("k", fencing.MaxKeyLen)); err != nil {
			t.Fatalf("key of exactly MaxKeyLen bytes: %v", err)
		}
	})

	t.Run("EnsureSchemaTwice", func(t *testing.T) {
		t.Parallel()
		pool, _ := newDB(t, srv)
		ctx := ctxT(t)
		iss, _ := fencing.NewIssuer(pool)
		if _, err := iss.Next(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		if err := fencing.EnsureSchema(ctx, pool); err != nil {
			t.Fatal(err)
		}
		v, err := iss.Next(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		if v != 2 {
			t.Fatalf("token %d after re-running the schema, want 2 (counters kept)", v)
		}
	})

	t.Run("NilDatabase", func(t *testing.T) {
		if _, err := fencing.NewIssuer(nil); !errors.Is(err, fencing.ErrInvalid) {
			t.Fatalf("NewIssuer(nil) = %v, want ErrInvalid", err)
		}
		if err := fencing.EnsureSchema(context.Background(), nil); !errors.Is(err, fencing.ErrInvalid) {
			t.Fatalf("EnsureSchema(nil) = %v, want ErrInvalid", err)
		}
	})
}

type row struct {
	available int64
	fence     int64
	note      *string
}

func readRow(t *testing.T, q fencing.Querier, id string) row {
	t.Helper()
	var r row
	err := q.QueryRow(context.Background(), "SELECT available, last_fence, note FROM stock WHERE id = $1", id).
		Scan(&r.available, &r.fence, &r.note)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func seed(t *testing.T, pool *pgxpool.Pool, id string, available, fence int64) {
	t.Helper()
	_, err := pool.Exec(context.Background(),
		"INSERT INTO stock (id, available, last_fence) VALUES ($1, $2, $3)", id, available, fence)
	if err != nil {
		t.Fatal(err)
	}
}

func stockTable(t *testing.T) *fencing.Table {
	t.Helper()
	tbl, err := fencing.NewTable("stock", "id")
	if err != nil {
		t.Fatal(err)
	}
	return tbl
}

// decrement is the canonical fenced write: take qty units if available.
func decrement(key string, fence, qty int64) fencing.Update {
	return fencing.Update{
		Key:       key,
		Fence:     fence,
		Set:       []fencing.Assignment{fencing.Sub("available", qty)},
		Where:     []fencing.Condition{fencing.Ge("available", qty)},
		Returning: []string{"available"},
	}
}

func testFencedWrite(t *testing.T, srv pgServer) {
	t.Run("AcceptsHigherRejectsEqualAndLower", func(t *testing.T) {
		t.Parallel()
		pool, _ := newDB(t, srv)
		ctx := ctxT(t)
		tbl := stockTable(t)
		seed(t, pool, "42", 10, 0)

		var left int64
		if err := tbl.Update(ctx, pool, decrement("42", 41, 1), &left); err != nil {
			t.Fatal(err)
		}
		if left != 9 {
			t.Fatalf("returned available %d, want 9", left)
		}
		if err := tbl.Update(ctx, pool, decrement("42", 42, 1), &left); err != nil {
			t.Fatal(err)
		}
		if r := readRow(t, pool, "42"); r.available != 8 || r.fence != 42 {
			t.Fatalf("row %+v, want available 8 fence 42", r)
		}

		// The seed's late writer: 41 arrives after 42 was accepted.
		for _, f := range []int64{42, 41, 1} {
			err := tbl.Update(ctx, pool, decrement("42", f, 1), &left)
			if !errors.Is(err, fencing.ErrStaleFence) {
				t.Fatalf("fence %d: err %v, want ErrStaleFence", f, err)
			}
			if errors.Is(err, fencing.ErrConditionFailed) || errors.Is(err, fencing.ErrNotFound) {
				t.Fatalf("fence %d: err %v matches more than one reason", f, err)
			}
			var rej *fencing.RejectedError
			if !errors.As(err, &rej) || rej.Current != 42 || rej.Fence != f {
				t.Fatalf("fence %d: details %+v, want Current 42 Fence %d", f, rej, f)
			}
		}
		if r := readRow(t, pool, "42"); r.available != 8 || r.fence != 42 {
			t.Fatalf("stale writes changed the row: %+v", r)
		}
	})

	t.Run("ConditionFailed", func(t *testing.T) {
		t.Parallel()
		pool, _ := newDB(t, srv)
		ctx := ctxT(t)
		tbl := stockTable(t)
		seed(t, pool, "42", 1, 5)

		err := tbl.Update(ctx, pool, decrement("42", 6, 2), new(int64))
		if !errors.Is(err, fencing.ErrConditionFailed) {
			t.Fatalf("err %v, want ErrConditionFailed", err)
		}
		var rej *fencing.RejectedError
		if !errors.As(err, &rej) || rej.Current != 5 {
			t.Fatalf("details %+v, want Current 5", rej)
		}
		// Neither the stock nor the fence moved.
		if r := readRow(t, pool, "42"); r.available != 1 || r.fence != 5 {
			t.Fatalf("row %+v, want available 1 fence 5", r)
		}
		// The same fence may still be used for a write that fits.
		if err := tbl.Update(ctx, pool, decrement("42", 6, 1), new(int64)); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("StaleWinsOverCondition", func(t *testing.T) {
		t.Parallel()
		pool, _ := newDB(t, srv)
		ctx := ctxT(t)
		tbl := stockTable(t)
		seed(t, pool, "42", 0, 9)
		err := tbl.Update(ctx, pool, decrement("42", 3, 1), new(int64))
		if !errors.Is(err, fencing.ErrStaleFence) {
			t.Fatalf("err %v, want ErrStaleFence", err)
		}
	})

	t.Run("NotFound", func(t *testing.T) {
		t.Parallel()
		pool, _ := newDB(t, srv)
		ctx := ctxT(t)
		tbl := stockTable(t)
		err := tbl.Update(ctx, pool, decrement("nope", 1, 1), new(int64))
		if !errors.Is(err, fencing.ErrNotFound) {
			t.Fatalf("err %v, want ErrNotFound", err)
		}
		var n int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM stock").Scan(&n); err != nil || n != 0 {
			t.Fatalf("rows %d, %v; want 0", n, err)
		}
	})

	t.Run("SetAddNowAndNoConditions", func(t *testing.T) {
		t.Parallel()
		pool, _ := newDB(t, srv)
		ctx := ctxT(t)
		if _, err := pool.Exec(ctx, "ALTER TABLE stock ADD COLUMN touched timestamptz"); err != nil {
			t.Fatal(err)
		}
		tbl := stockTable(t)
		seed(t, pool, "42", 1, 0)
		var (
			note    string
			avail   int64
			touched time.Time
		)
		err := tbl.Update(ctx, pool, fencing.Update{
			Key:   "42",
			Fence: 1,
			Set: []fencing.Assignment{
				fencing.Set("note", "restocked"),
				fencing.Add("available", 4),
				fencing.SetNow("touched"),
			},
			Returning: []string{"note", "available", "touched"},
		}, &note, &avail, &touched)
		if err != nil {
			t.Fatal(err)
		}
		if note != "restocked" || avail != 5 || touched.IsZero() {
			t.Fatalf("returned %q %d %v", note, avail, touched)
		}
		// Only the fence: no assignments at all still records it.
		if err := tbl.Update(ctx, pool, fencing.Update{Key: "42", Fence: 2}); err != nil {
			t.Fatal(err)
		}
		if r := readRow(t, pool, "42"); r.fence != 2 || r.available != 5 {
			t.Fatalf("row %+v", r)
		}
	})

	t.Run("NullConditionCountsAsFalse", func(t *testing.T) {
		t.Parallel()
		pool, _ := newDB(t, srv)
		ctx := ctxT(t)
		tbl := stockTable(t)
		seed(t, pool, "42", 1, 0)
		err := tbl.Update(ctx, pool, fencing.Update{
			Key: "42", Fence: 1,
			Set:   []fencing.Assignment{fencing.Set("note", "x")},
			Where: []fencing.Condition{fencing.Eq("note", "y")},
		})
		if !errors.Is(err, fencing.ErrConditionFailed) {
			t.Fatalf("err %v, want ErrConditionFailed", err)
		}
	})

	t.Run("InsideTransaction", func(t *testing.T) {
		t.Parallel()
		pool, _ := newDB(t, srv)
		ctx := ctxT(t)
		tbl := stockTable(t)
		seed(t, pool, "42", 5, 0)

		// A rejected write leaves the caller's transaction usable, and a
		// rollback undoes the accepted one.
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := tbl.Update(ctx, tx, decrement("42", 7, 2), new(int64)); err != nil {
			t.Fatal(err)
		}
		if err := tbl.Update(ctx, tx, decrement("42", 7, 1), new(int64)); !errors.Is(err, fencing.ErrStaleFence) {
			t.Fatalf("second write with the same fence: %v, want ErrStaleFence", err)
		}
		if r := readRow(t, tx, "42"); r.available != 3 {
			t.Fatalf("inside tx: %+v", r)
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		if r := readRow(t, pool, "42"); r.available != 5 || r.fence != 0 {
			t.Fatalf("after rollback: %+v", r)
		}

		err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			return tbl.Update(ctx, tx, decrement("42", 7, 2), new(int64))
		})
		if err != nil {
			t.Fatal(err)
		}
		if r := readRow(t, pool, "42"); r.available != 3 || r.fence != 7 {
			t.Fatalf("after commit: %+v", r)
		}
	})

	t.Run("ConcurrentWritersNeverOversell", func(t *testing.T) {
		t.Parallel()
		pool, _ := newDB(t, srv)
		ctx := ctxT(t)
		tbl := stockTable(t)
		seed(t, pool, "42", 10, 0)
		const writers = 40
		var (
			wg       sync.WaitGroup
			mu       sync.Mutex
			accepted []int64
			reasons  = map[error]int{}
		)
		for f := int64(1); f <= writers; f++ {
			wg.Go(func() {
				err := tbl.Update(ctx, pool, decrement("42", f, 1), new(int64))
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					accepted = append(accepted, f)
				case errors.Is(err, fencing.ErrStaleFence):
					reasons[fencing.ErrStaleFence]++
				case errors.Is(err, fencing.ErrConditionFailed):
					reasons[fencing.ErrConditionFailed]++
				default:
					t.Errorf("fence %d: %v", f, err)
				}
			})
		}
		wg.Wait()
		r := readRow(t, pool, "42")
		if int64(len(accepted)) != 10-r.available {
			t.Fatalf("%d writes accepted but available went 10 -> %d", len(accepted), r.available)
		}
		if len(accepted) == 0 || r.fence != slices.Max(accepted) {
			t.Fatalf("last_fence %d, accepted %v", r.fence, accepted)
		}
		if len(accepted)+reasons[fencing.ErrStaleFence]+reasons[fencing.ErrConditionFailed] != writers {
			t.Fatalf("accepted %d, rejected %v, want %d in all", len(accepted), reasons, writers)
		}
	})

	t.Run("NamesAreNotInjectable", func(t *testing.T) {
		t.Parallel()
		pool, _ := newDB(t, srv)
		ctx := ctxT(t)
		seed(t, pool, "42", 5, 0)
		evil, err := fencing.NewTable(`stock" SET available = 0; --`, "id")
		if err != nil {
			t.Fatal(err)
		}
		err = evil.Update(ctx, pool, decrement("42", 1, 1), new(int64))
		if err == nil || errors.Is(err, fencing.ErrNotFound) {
			t.Fatalf("quoted table name matched a table: %v", err)
		}
		tbl := stockTable(t)
		err = tbl.Update(ctx, pool, fencing.Update{
			Key: "42", Fence: 1,
			Set: []fencing.Assignment{fencing.Set(`note" = 'x', available = 0 --`, "y")},
		})
		if err == nil {
			t.Fatal("quoted column name matched a column")
		}
		// A key that looks like SQL is just a value.
		err = tbl.Update(ctx, pool, decrement("42' OR '1'='1", 1, 1), new(int64))
		if !errors.Is(err, fencing.ErrNotFound) {
			t.Fatalf("SQL-looking key: %v, want ErrNotFound", err)
		}
		if r := readRow(t, pool, "42"); r.available != 5 || r.fence != 0 {
			t.Fatalf("row changed: %+v", r)
		}
	})

	t.Run("InvalidInputWritesNothing", func(t *testing.T) {
		t.Parallel()
		pool, _ := newDB(t, srv)
		ctx := ctxT(t)
		tbl := stockTable(t)
		seed(t, pool, "42", 5, 0)
		cases := map[string]struct {
			u    fencing.Update
			dest []any
		}{
			"zeroFence":     {decrement("42", 0, 1), []any{new(int64)}},
			"negativeFence": {decrement("42", -3, 1), []any{new(int64)}},
			"nilKey":        {fencing.Update{Fence: 1}, nil},
			"fenceInSet":    {fencing.Update{Key: "42", Fence: 1, Set: []fencing.Assignment{fencing.Set("last_fence", 99)}}, nil},
			"fenceInWhere":  {fencing.Update{Key: "42", Fence: 1, Where: []fencing.Condition{fencing.Lt("last_fence", 99)}}, nil},
			"keyInSet":      {fencing.Update{Key: "42", Fence: 1, Set: []fencing.Assignment{fencing.Set("id", "43")}}, nil},
			"twice":         {fencing.Update{Key: "42", Fence: 1, Set: []fencing.Assignment{fencing.Add("available", 1), fencing.Sub("available", 1)}}, nil},
			"zeroAssign":    {fencing.Update{Key: "42", Fence: 1, Set: []fencing.Assignment{{}}}, nil},
			"zeroCondition": {fencing.Update{Key: "42", Fence: 1, Where: []fencing.Condition{{}}}, nil},
			"destMismatch":  {decrement("42", 1, 1), nil},
			"emptyColumn":   {fencing.Update{Key: "42", Fence: 1, Set: []fencing.Assignment{fencing.Set("", 1)}}, nil},
			"longColumn":    {fencing.Update{Key: "42", Fence: 1, Set: []fencing.Assignment{fencing.Set(strings.Repeat("c", 64), 1)}}, nil},
		}
		for name, c := range cases {
			if err := tbl.Update(ctx, pool, c.u, c.dest...); !errors.Is(err, fencing.ErrInvalid) {
				t.Errorf("%s: err %v, want ErrInvalid", name, err)
			}
		}
		if err := tbl.Update(ctx, nil, decrement("42", 1, 1), new(int64)); !errors.Is(err, fencing.ErrInvalid) {
			t.Errorf("nil querier: %v", err)
		}
		if r := readRow(t, pool, "42"); r.available != 5 || r.fence != 0 {
			t.Fatalf("row changed: %+v", r)
		}
	})

	t.Run("SchemaAndFenceColumnOptions", func(t *testing.T) {
		t.Parallel()
		pool, _ := newDB(t, srv)
		ctx := ctxT(t)
		_, err := pool.Exec(ctx, `CREATE SCHEMA inv; CREATE TABLE inv."Items" ("SKU" text PRIMARY KEY, qty int NOT NULL, fence bigint NOT NULL DEFAULT 0);
			INSERT INTO inv."Items" VALUES ('a', 3, 0)`)
		if err != nil {
			t.Fatal(err)
		}
		tbl, err := fencing.NewTable("Items", "SKU", fencing.WithSchema("inv"), fencing.WithFenceColumn("fence"))
		if err != nil {
			t.Fatal(err)
		}
		if tbl.Name() != `"inv"."Items"` {
			t.Fatalf("Name() = %s", tbl.Name())
		}
		if err := tbl.Update(ctx, pool, fencing.Update{Key: "a", Fence: 4, Set: []fencing.Assignment{fencing.Sub("qty", 1)}}); err != nil {
			t.Fatal(err)
		}
		err = tbl.Update(ctx, pool, fencing.Update{Key: "a", Fence: 4, Set: []fencing.Assignment{fencing.Sub("qty", 1)}})
		if !errors.Is(err, fencing.ErrStaleFence) {
			t.Fatalf("err %v, want ErrStaleFence", err)
		}
	})
}

func TestNewTableRejectsBadNames(t *testing.T) {
	bad := []struct {
		table, key string
		opts       []fencing.TableOption
	}{
		{"", "id", nil},
		{"t", "", nil},
		{strings.Repeat("t", 64), "id", nil},
		{"t\x00", "id", nil},
		{"t", "id\xff", nil},
		{"t", "id", []fencing.TableOption{fencing.WithSchema("")}},
		{"t", "id", []fencing.TableOption{fencing.WithFenceColumn("")}},
		{"t", "id", []fencing.TableOption{fencing.WithFenceColumn("id")}},
		{"t", "id", []fencing.TableOption{nil}},
	}
	for _, c := range bad {
		if _, err := fencing.NewTable(c.table, c.key, c.opts...); !errors.Is(err, fencing.ErrInvalid) {
			t.Errorf("NewTable(%q, %q) = %v, want ErrInvalid", c.table, c.key, err)
		}
	}
	_, err := fencing.NewTable("t", "id", fencing.WithSchema("s"), nil)
	if err == nil || !strings.Contains(err.Error(), "option 1 is nil") {
		t.Errorf("a nil second option: %v, want an error naming option 1", err)
	}
}

func TestRejectedErrorMessage(t *testing.T) {
	err := error(&fencing.RejectedError{Reason: fencing.ErrStaleFence, Table: `"stock"`, Key: "42", Fence: 41, Current: 42})
	if got := err.Error(); !strings.Contains(got, "41") || !strings.Contains(got, "42") || !strings.Contains(got, "stale") {
		t.Fatalf("message %q lacks the details", got)
	}
	if !errors.Is(err, fencing.ErrStaleFence) || errors.Is(err, fencing.ErrNotFound) {
		t.Fatal("errors.Is does not follow Reason")
	}
}

// The Issuer is the quorum locker's Fencer without importing it.
var _ interface {
	Next(ctx context.Context, key string) (int64, error)
} = (*fencing.Issuer)(nil)
