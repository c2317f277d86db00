package store

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/quorumlock/quorumlock/fencing"
	"github.com/quorumlock/quorumlock/internal/failpoint"
	"github.com/quorumlock/quorumlock/orders/request"
)

// CartLine is one product of a [Cart] and how its stock write is fenced.
type CartLine struct {
	// ProductID is 1 to request.MaxIDLen bytes.
	ProductID string
	// Quantity is request.MinQuantity to request.MaxQuantity.
	Quantity int64
	// Fence and FenceKey say how the line's stock row is fenced:
	//   - Fence > 0 and FenceKey set: a token reserved by a
	//     fencing.Reserver (a lease's FenceOf), taken on FenceKey's counter
	//     in the transaction (fencing.Take); a token taken since makes the
	//     transaction stale;
	//   - Fence > 0 and no FenceKey: a token already taken (an Issuer's);
	//   - Fence 0: the transaction takes the next token of FenceKey itself
	//     (Postgres arbitrates alone), so concurrent writers get theirs in
	//     the order they reach the counter and never make each other stale.
	// Either way the stock row accepts the write only with a fence above
	// the last one it saw.
	Fence    int64
	FenceKey string
}

// Cart is one order, of one product or several, for [Store.PlaceCarts]:
// a single-product order is a one-line cart.
type Cart struct {
	// Order is who asks, under which key, and the new order's id; its
	// Quantity is the units of every line.
	Order OrderRequest
	// Lines holds 1 to request.MaxItems lines, sorted by product id, one
	// per product: the order in which their stock rows are locked, so
	// that carts sharing products never deadlock.
	Lines []CartLine
	// Snapshot renders the response saved with a new outcome (a created
	// order, or an out-of-stock rejection) and replayed byte for byte. The
	// store keeps it as data.
	Snapshot func(Outcome) Snapshot
}

// CartResult is what [Store.PlaceCarts] did with one cart.
type CartResult struct {
	Placed
	// Left is each line's stock after the transaction, in Cart.Lines'
	// order; nil when the stock was not read (a replayed outcome).
	Left []int64
}

func (c Cart) validate() error {
	o := c.Order
	o.Quantity = request.MinQuantity // a cart's units may pass one line's limit; they are checked below
	if err := o.validate(); err != nil {
		return err
	}
	if len(c.Lines) == 0 || len(c.Lines) > request.MaxItems {
		return fmt.Errorf("%w: %d lines in a cart, want 1..%d", ErrInvalid, len(c.Lines), request.MaxItems)
	}
	var units int64
	for i, l := range c.Lines {
		if err := checkText("product id", l.ProductID, request.MaxIDLen); err != nil {
			return err
		}
		switch {
		case i > 0 && c.Lines[i-1].ProductID >= l.ProductID:
			return fmt.Errorf("%w: cart lines are not sorted by product, one per product", ErrInvalid)
		case l.Quantity < request.MinQuantity || l.Quantity > request.MaxQuantity:
			return fmt.Errorf("%w: quantity %d is outside %d..%d", ErrInvalid, l.Quantity, request.MinQuantity, request.MaxQuantity)
		case l.Fence < 0 || (l.Fence == 0 && l.FenceKey == ""):
			return fmt.Errorf("%w: line %q has no usable fence", ErrInvalid, l.ProductID)
		}
		units += l.Quantity
	}
	switch {
	case c.Snapshot == nil:
		return fmt.Errorf("%w: no snapshot renderer", ErrInvalid)
	case units != c.Order.Quantity:
		return fmt.Errorf("%w: the cart's quantity %d is not its lines' %d", ErrInvalid, c.Order.Quantity, units)
	}
	return nil
}

// PlaceCarts places carts in one transaction, each all lines or none, first
// come first served, and returns one result per cart, in order:
//
//  1. Every (user, idempotency key) of the batch is locked, in a fixed
//     order, on a transaction-scoped advisory lock, and its saved outcome
//     read: a saved order or rejection is replayed, or refused
//     with ErrFingerprintMismatch; a key given twice gets the first
//     cart's answer.
//  2. For each product of the new carts, in product order (the order in
//     which every transaction takes stock rows, so none waits in a cycle),
//     the fence is taken as its lines say (every line of a product must
//     say the same) and the stock row locked and read: a stale fence fails
//     the whole transaction with ErrStaleFence, an unknown product with
//     ErrUnknownProduct, nothing written.
//  3. Each cart, in turn, takes its units if every line is covered; a cart
//     with a short line takes nothing and gets the saved out-of-stock
//     outcome naming its short lines (Outcome.Short, Err ErrOutOfStock).
//     One fenced conditional decrement per product takes the total, and
//     the orders and their lines are inserted under UNIQUE(user_id,
//     idempotency_key).
//
// Other errors leave the database as it was, unless the commit itself was
// interrupted; [Store.Lookup] then tells, per key.
func (s *Store) PlaceCarts(ctx context.Context, carts []Cart) ([]CartResult, error) {
	if len(carts) == 0 || len(carts) > MaxBatch {
		return nil, fmt.Errorf("%w: %d carts in a batch, want 1..%d", ErrInvalid, len(carts), MaxBatch)
	}
	for _, c := range carts {
		if err := c.validate(); err != nil {
			return nil, err
		}
	}
	if _, err := fencesOf(carts); err != nil {
		return nil, err
	}
	for attempt := 1; ; attempt++ {
		res, err := s.cartsTx(ctx, carts)
		if isIdempotencyConflict(err) && attempt < 3 {
			continue // a twin committed first: the next run replays it
		}
		return res, err
	}
}

// lineFence is how one product's stock row is fenced in a transaction.
type lineFence struct {
	fence int64
	key   string
}

// fencesOf returns each product's fence, refusing carts whose lines of
// one product disagree.
func fencesOf(carts []Cart) (map[string]lineFence, error) {
	out := map[string]lineFence{}
	for _, c := range carts {
		for _, l := range c.Lines {
			f := lineFence{l.Fence, l.FenceKey}
			if g, ok := out[l.ProductID]; ok && g != f {
				return nil, fmt.Errorf("%w: the carts fence product %q in two ways", ErrInvalid, l.ProductID)
			}
			out[l.ProductID] = f
		}
	}
	return out, nil
}

// cartsTx runs one attempt of PlaceCarts.
func (s *Store) cartsTx(ctx context.Context, carts []Cart) (_ []CartResult, err error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("store: place carts: begin: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	orders := make([]OrderRequest, len(carts))
	for i, c := range carts {
		orders[i] = c.Order
	}
	if !s.noTwinLock {
		if err := lockKeys(ctx, tx, orders); err != nil {
			return nil, err
		}
	}
	placed, fresh, err := replays(ctx, tx, orders)
	if err != nil {
		return nil, err
	}
	if slices.ContainsFunc(placed, func(p Placed) bool { return p.Outcome.Kind != "" || p.Err != nil }) {
		// Some answers replay saved outcomes: the commit must not return
		// before they are durable.
		if err := AwaitDurable(ctx, tx); err != nil {
			return nil, err
		}
	}
	out := make([]CartResult, len(carts))
	if len(fresh) > 0 {
		if err := s.sellCarts(ctx, tx, carts, fresh, placed, out); err != nil {
			return nil, err
		}
	}
	answerRepeats(orders, placed)
	for i := range out {
		out[i].Placed = placed[i]
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("store: place carts: commit: %w", err)
	}
	return out, nil
}

// rowState is one locked stock row during a transaction: its fence, price
// and units, and the units the carts took so far.
type rowState struct {
	fence, price, available, taken int64
}

// sellCarts locks the rows of the fresh carts' products, gives each
// cart its units while they last, and writes the outcomes.
func (s *Store) sellCarts(ctx context.Context, tx pgx.Tx, carts []Cart, fresh []int, placed []Placed, out []CartResult) error {
	rows, err := s.claimRows(ctx, tx, carts, fresh)
	if err != nil {
		return err
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	var made, short []Outcome
	for _, i := range fresh {
		if sl := shortLines(carts[i], rows); len(sl) > 0 {
			placed[i].Outcome = cartShortOutcome(carts[i], sl, now)
			placed[i].Err = fmt.Errorf("%w: %d of the cart's lines", ErrOutOfStock, len(sl))
			short = append(short, placed[i].Outcome)
		} else {
			lines, err := takeLines(carts[i], rows)
			if err != nil {
				return err
			}
			placed[i].Outcome = cartOrderOutcome(carts[i], lines, now)
			made = append(made, placed[i].Outcome)
		}
		if err := checkSnapshot(placed[i].Outcome); err != nil {
			return err
		}
	}
	if err := s.decrement(ctx, tx, rows); err != nil {
		return err
	}
	if err := insertCarts(ctx, tx, made); err != nil {
		return err
	}
	if err := saveShort(ctx, tx, short); err != nil {
		return err
	}
	for _, i := range fresh {
		out[i].Left = make([]int64, len(carts[i].Lines))
		for j, l := range carts[i].Lines {
			out[i].Left[j] = rows[l.ProductID].available
		}
	}
	return nil
}

// claimRows takes the fence of every product of the fresh carts and locks
// its stock row (FOR UPDATE), in product order: the counter, then the row,
// as every transaction takes them, so none waits in a cycle. Nothing is
// written to a row yet, so carts that end short leave it as it was.
func (s *Store) claimRows(ctx context.Context, tx pgx.Tx, carts []Cart, fresh []int) (map[string]*rowState, error) {
	fences, _ := fencesOf(carts) // checked by PlaceCarts
	rows := map[string]*rowState{}
	for _, i := range fresh {
		for _, l := range carts[i].Lines {
			rows[l.ProductID] = &rowState{}
		}
	}
	for _, p := range slices.Sorted(maps.Keys(rows)) {
		r := rows[p]
		var err error
		if r.fence, err = s.fence(ctx, tx, fences[p].fence, fences[p].key); err != nil {
			return nil, err
		}
		var last int64
		err = tx.QueryRow(ctx, `SELECT available, price_cents, last_fence FROM product_stock WHERE product_id = $1 FOR UPDATE`, p).
			Scan(&r.available, &r.price, &last)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return nil, fmt.Errorf("%w: %q", ErrUnknownProduct, p)
		case err != nil:
			return nil, fmt.Errorf("store: place carts: read stock of %q: %w", p, err)
		case last >= r.fence:
			return nil, fmt.Errorf("store: place carts: %w", &fencing.RejectedError{Reason: ErrStaleFence,
				Table: `"product_stock"`, Key: p, Fence: r.fence, Current: last})
		}
	}
	return rows, nil
}

// shortLines returns the lines of c that the rows cannot cover now.
func shortLines(c Cart, rows map[string]*rowState) []ShortLine {
	var short []ShortLine
	for _, l := range c.Lines {
		if r := rows[l.ProductID]; r.available < l.Quantity {
			short = append(short, ShortLine{ProductID: l.ProductID, Quantity: l.Quantity, Available: r.available})
		}
	}
	return short
}

// takeLines takes c's units off the rows and returns its lines as sold.
func takeLines(c Cart, rows map[string]*rowState) ([]Line, error) {
	lines := make([]Line, len(c.Lines))
	var total int64
	for j, l := range c.Lines {
		r := rows[l.ProductID]
		if r.price > math.MaxInt64/l.Quantity || total > math.MaxInt64-r.price*l.Quantity {
			return nil, fmt.Errorf("%w: the cart's amount overflows", ErrInvalid)
		}
		total += r.price * l.Quantity
		r.available -= l.Quantity
		r.taken += l.Quantity
		lines[j] = Line{ProductID: l.ProductID, Quantity: l.Quantity, AmountCents: r.price * l.Quantity, Fence: r.fence}
	}
	return lines, nil
}

// decrement takes each claimed row's units with one fenced conditional
// decrement, in product order.
func (s *Store) decrement(ctx context.Context, tx pgx.Tx, rows map[string]*rowState) error {
	for _, p := range slices.Sorted(maps.Keys(rows)) {
		r := rows[p]
		if r.taken == 0 {
			continue
		}
		err := s.stock.Update(ctx, tx, fencing.Update{Key: p, Fence: r.fence,
			Set:   []fencing.Assignment{fencing.Sub("available", r.taken)},
			Where: []fencing.Condition{fencing.Ge("available", r.taken)}})
		if err != nil {
			return fmt.Errorf("store: place carts: take stock of %q: %w", p, err)
		}
	}
	s.failpoints.Hit(failpoint.AfterDecrement)
	return nil
}

// cartOrderOutcome is the outcome of a new cart order, with its snapshot.
func cartOrderOutcome(c Cart, lines []Line, now time.Time) Outcome {
	o := c.Order
	order := Order{ID: o.OrderID, UserID: o.UserID, Quantity: o.Quantity, IdempotencyKey: o.IdempotencyKey.String(),
		Fingerprint: o.Fingerprint, Status: StatusCreated, Fence: lines[0].Fence, CreatedAt: now, UpdatedAt: now, Lines: lines}
	for _, l := range lines {
		order.AmountCents += l.AmountCents // takeLines checked the sum
	}
	if len(lines) == 1 {
		order.ProductID = lines[0].ProductID
	}
	out := orderOutcome(order, 0, nil)
	snap := c.Snapshot(out)
	out.ResponseStatus, out.ResponseBody = snap.Status, nonNil(snap.Body)
	return out
}

// cartShortOutcome is the out-of-stock outcome of a cart, naming the short
// lines, with its snapshot.
func cartShortOutcome(c Cart, short []ShortLine, now time.Time) Outcome {
	o := c.Order
	out := Outcome{Kind: OutcomeOutOfStock, UserID: o.UserID, IdempotencyKey: o.IdempotencyKey.String(),
		Fingerprint: o.Fingerprint, Quantity: o.Quantity, CreatedAt: now, Short: short}
	if len(c.Lines) == 1 {
		out.ProductID = c.Lines[0].ProductID
	}
	snap := c.Snapshot(out)
	out.ResponseStatus, out.ResponseBody = snap.Status, nonNil(snap.Body)
	return out
}

// insertCarts inserts new cart orders: their lines, then the orders
// (product NULL for several lines), with their snapshots.
func insertCarts(ctx context.Context, tx pgx.Tx, made []Outcome) error {
	if len(made) == 0 {
		return nil
	}
	var ids, products []string
	var qty, amounts, fences []int64
	for _, m := range made {
		for _, l := range m.Order.Lines {
			ids, products = append(ids, m.Order.ID), append(products, l.ProductID)
			qty, amounts, fences = append(qty, l.Quantity), append(amounts, l.AmountCents), append(fences, l.Fence)
		}
	}
	if _, err := tx.Exec(ctx, insertLines, ids, products, qty, amounts, fences); err != nil {
		return fmt.Errorf("store: place carts: insert lines: %w", err)
	}
	_, err := tx.Exec(ctx, `INSERT INTO orders (`+orderColumns+`, response_status, response_body)
SELECT a, b, NULLIF(c, ''), d, e, f, g, h, i, j, k, l, m FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[],
  $5::bigint[], $6::text[], $7::text[], $8::text[], $9::bigint[], $10::timestamptz[], $11::timestamptz[], $12::int[], $13::bytea[])
  AS x(a, b, c, d, e, f, g, h, i, j, k, l, m)`, orderRows(made)...)
	if err != nil {
		return fmt.Errorf("store: place carts: insert: %w", err)
	}
	return nil
}
