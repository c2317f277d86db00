package chaos

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/quorumlock/quorumlock/fencing"
	"github.com/quorumlock/quorumlock/internal/wait"
)

// Tables of the cart workload, in the bed's main database.
const (
	// cartStockTable holds one row per product, fenced like stockTable.
	cartStockTable = "cart_stock"
	// cartsTable is the ledger: one row per committed cart, written in the
	// cart's transaction, naming its products and the units of each.
	cartsTable = "cart_ledger"
	// cartLinesTable holds one row per product row a committed cart wrote,
	// in commit order per product (seq): the row's value before and after
	// the write, both read under the row lock in the cart's transaction.
	cartLinesTable = "cart_lines"
)

// ScarceStock is the starting stock of the last product (CartProducts):
// a run sells it out, and from then on the carts that name it are refused,
// in their transaction, after their other rows were written: the
// transaction must roll back every one of them.
const ScarceStock = 60

// CartProducts are the products of the cart workload, in product order
// (the order rows are read and written in). The others start with
// InitialStock, the last with ScarceStock.
var CartProducts = []string{"p1", "p2", "p3", "p4"}

// CartKey is the lock key of a product of the cart workload.
func CartKey(product string) string { return "stock:" + product }

// cartStock returns each product's starting stock.
func cartStock() map[string]int64 {
	m := make(map[string]int64, len(CartProducts))
	for i, p := range CartProducts {
		m[p] = InitialStock
		if i == len(CartProducts)-1 {
			m[p] = ScarceStock
		}
	}
	return m
}

// cartSchema drops and recreates the cart tables with their starting stock.
func cartSchema() string {
	var vals []string
	stock := cartStock()
	for _, p := range CartProducts {
		vals = append(vals, fmt.Sprintf("('%s', %d)", p, stock[p]))
	}
	return `
		DROP TABLE IF EXISTS ` + cartStockTable + `, ` + cartsTable + `, ` + cartLinesTable + `;
		CREATE TABLE ` + cartStockTable + ` (product_id text PRIMARY KEY, available bigint NOT NULL, last_fence bigint NOT NULL DEFAULT 0);
		CREATE TABLE ` + cartsTable + ` (cart text PRIMARY KEY, worker int NOT NULL, round int NOT NULL, products text[] NOT NULL, units bigint[] NOT NULL);
		CREATE TABLE ` + cartLinesTable + ` (seq bigserial PRIMARY KEY, cart text NOT NULL, product_id text NOT NULL, fence bigint NOT NULL,
			units bigint NOT NULL, before bigint NOT NULL, after bigint NOT NULL);
		INSERT INTO ` + cartStockTable + ` (product_id, available) VALUES ` + strings.Join(vals, ", ") + `;`
}

// line is one product of a cart in a worker's round.
type line struct {
	product string
	key     string // the product's lock key
	units   int64
	fence   int64 // the lease's fence of key
	read    int64 // the value the holder read
}

// pickCart draws 2 or 3 distinct products, in a random order, with 1 to 3
// units of each.
func (w *worker) pickCart() []line {
	perm := w.rng.Perm(len(CartProducts))
	lines := make([]line, 2+w.rng.IntN(2))
	for i := range lines {
		p := CartProducts[perm[i]]
		lines[i] = line{product: p, key: CartKey(p), units: 1 + w.rng.Int64N(3)}
	}
	return lines
}

// cartRound is one pass of the cart loop: lock the cart's keys in one
// lease (named in the order drawn), read every row (a fencing Claim with
// the fence of the row's own key, or a plain SELECT), hold, then write
// every row in one transaction: a conditional decrement computed from the
// value read (available := read - units, if available >= units), fenced
// with the key's fence or plain. Rows are read and written in product
// order, so two transactions never wait for each other in a cycle.
func (w *worker) cartRound(ctx context.Context, n int) {
	lines := w.pickCart()
	keys := make([]string, len(lines))
	for i, l := range lines {
		keys[i] = l.key
	}
	w.emit(Event{Round: n, Op: OpLock, Phase: PhaseCall, Keys: keys})
	le, err := w.locker.LockMulti(ctx, keys...)
	if err != nil {
		r, msg := result(err)
		w.emit(Event{Round: n, Op: OpLock, Phase: PhaseReturn, Result: r, Err: msg, Keys: keys})
		_ = wait.Sleep(ctx, 5*time.Millisecond)
		return
	}
	until := wallUntil(le)
	slices.SortFunc(lines, func(a, b line) int { return strings.Compare(a.key, b.key) })
	held, fences := le.Keys(), make([]int64, len(lines))
	for i := range lines {
		lines[i].fence = le.FenceOf(lines[i].key)
		fences[i] = lines[i].fence
	}
	w.emit(Event{Round: n, Op: OpLock, Phase: PhaseReturn, Result: ResultOK, Keys: held, Fences: fences, Until: until})
	defer w.unlock(ctx, le, Event{Round: n, Keys: held, Fences: fences})
	db, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if !w.readCart(db, n, lines) {
		return
	}
	w.hold(ctx, Event{Round: n, Keys: held, Fences: fences, Until: wallUntil(le)})
	w.writeCart(db, n, lines)
}

// readCart reads every row of the cart into its line; it stops at the
// first failure and reports whether every read succeeded.
func (w *worker) readCart(ctx context.Context, n int, lines []line) bool {
	for i := range lines {
		l := &lines[i]
		w.emit(Event{Round: n, Op: OpRead, Phase: PhaseCall, Key: l.key, Fence: l.fence})
		var err error
		if w.cfg.Fenced {
			err = w.table.Claim(ctx, w.pool, l.product, l.fence, []string{"available"}, &l.read)
		} else {
			err = w.pool.QueryRow(ctx, "SELECT available FROM "+cartStockTable+" WHERE product_id = $1", l.product).Scan(&l.read)
		}
		r, msg := result(err)
		w.emit(Event{Round: n, Op: OpRead, Phase: PhaseReturn, Key: l.key, Fence: l.fence, Value: l.read, Result: r, Err: msg})
		if err != nil {
			return false
		}
	}
	return true
}

// writeCart writes the cart in one transaction and reports each row's
// outcome: ok when the cart committed; for a cart that rolled back, the
// failing row's reason and aborted for every other row; error for every
// row when the commit itself failed (its outcome is unknown).
func (w *worker) writeCart(ctx context.Context, n int, lines []line) {
	for _, l := range lines {
		w.emit(Event{Round: n, Op: OpWrite, Phase: PhaseCall, Key: l.key, Fence: l.fence, Value: l.read - l.units})
	}
	failed, err := w.commitCart(ctx, n, lines)
	for i, l := range lines {
		r, msg := result(err)
		switch {
		case err != nil && failed < 0:
			r = ResultError
		case err != nil && i != failed:
			r, msg = ResultAborted, fmt.Sprintf("the cart rolled back at %s: %v", lines[failed].product, err)
		}
		w.emit(Event{Round: n, Op: OpWrite, Phase: PhaseReturn, Key: l.key, Fence: l.fence, Value: l.read - l.units, Result: r, Err: msg})
	}
}

// commitCart runs the cart's transaction: a decrement per row, then the
// ledger entry. failed is the index of the row whose statement failed (the
// transaction rolled back), or -1.
func (w *worker) commitCart(ctx context.Context, n int, lines []line) (failed int, err error) {
	failed = -1
	cart := fmt.Sprintf("%d/%d", w.cfg.ID, n)
	products, units := make([]string, len(lines)), make([]int64, len(lines))
	for i, l := range lines {
		products[i], units[i] = l.product, l.units
	}
	err = pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
		for i, l := range lines {
			if err := w.decrement(ctx, tx, cart, l); err != nil {
				failed = i
				return err
			}
		}
		_, err := tx.Exec(ctx, "INSERT INTO "+cartsTable+" (cart, worker, round, products, units) VALUES ($1, $2, $3, $4, $5)",
			cart, w.cfg.ID, n, products, units)
		return err
	})
	return failed, err
}

// decrement writes one row of a cart in tx and records the line: the row's
// value before (read under the row lock) and after the write.
func (w *worker) decrement(ctx context.Context, tx pgx.Tx, cart string, l line) error {
	var before, after int64
	err := tx.QueryRow(ctx, "SELECT available FROM "+cartStockTable+" WHERE product_id = $1 FOR UPDATE", l.product).Scan(&before)
	if err != nil {
		return err
	}
	if w.cfg.Fenced {
		err = w.table.Update(ctx, tx, fencing.Update{Key: l.product, Fence: l.fence, Claimed: true,
			Set:       []fencing.Assignment{fencing.Set("available", l.read-l.units)},
			Where:     []fencing.Condition{fencing.Ge("available", l.units)},
			Returning: []string{"available"}}, &after)
	} else {
		err = tx.QueryRow(ctx, "UPDATE "+cartStockTable+" SET available = $1 WHERE product_id = $2 AND available >= $3 RETURNING available",
			l.read-l.units, l.product, l.units).Scan(&after)
		if errors.Is(err, pgx.ErrNoRows) {
			err = fmt.Errorf("%w: %s has fewer than %d units", fencing.ErrConditionFailed, l.product, l.units)
		}
	}
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, "INSERT INTO "+cartLinesTable+" (cart, product_id, fence, units, before, after) VALUES ($1, $2, $3, $4, $5, $6)",
		cart, l.product, l.fence, l.units, before, after)
	return err
}
