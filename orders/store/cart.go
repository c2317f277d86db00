package store

import (
	"context"
	"errors"
	"fmt"
	"math"
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
	// Fence and FenceKey fence the line's stock row as Batch.Fence and
	// Batch.FenceKey fence a batch's: a reserved token (both set), a token
	// already taken (Fence only), or the next of FenceKey taken in the
	// transaction (Fence 0).
	Fence    int64
	FenceKey string
}

// Cart is the input of [Store.PlaceCart]: one order of several products.
type Cart struct {
	// Order is who asks, under which key, and the new order's id; its
	// Quantity is the units of every line.
	Order OrderRequest
	// Lines holds 1 to request.MaxItems lines, sorted by product id, one
	// per product: the order in which their stock rows are locked, so
	// that carts sharing products never deadlock.
	Lines []CartLine
	// Snapshot renders the response saved with a new outcome, as for a
	// Batch.
	Snapshot func(Outcome) Snapshot
}

// ShortLine is a line of a cart that the stock could not cover.
type ShortLine struct {
	ProductID string
	Quantity  int64
	Available int64
}

// CartResult is what [Store.PlaceCart] did.
type CartResult struct {
	Placed
	// Left is each line's stock after a new order, in Cart.Lines' order;
	// nil when nothing was sold.
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

// PlaceCart places a cart in one transaction, all lines or none:
//
//  1. The (user, idempotency key) is locked and its saved outcome read,
//     as in PlaceBatch: a saved order or rejection is replayed, or refused
//     with ErrFingerprintMismatch.
//  2. For each line, in product order, the fence is taken and the stock
//     row takes the line's quantity with one fenced conditional decrement
//     (available >= quantity). A stale fence fails the cart with
//     ErrStaleFence, an unknown product with ErrUnknownProduct.
//  3. If every line was covered, the order and its lines are inserted
//     under UNIQUE(user_id, idempotency_key). If any line was short, every
//     decrement is undone (a savepoint) and the out-of-stock outcome,
//     naming the short lines (Outcome.Short), is saved instead, with
//     ErrOutOfStock.
//
// Other errors leave the database as it was, unless the commit itself was
// interrupted; [Store.Lookup] then tells.
func (s *Store) PlaceCart(ctx context.Context, c Cart) (CartResult, error) {
	if err := c.validate(); err != nil {
		return CartResult{}, err
	}
	for attempt := 1; ; attempt++ {
		res, err := s.cartTx(ctx, c)
		if isIdempotencyConflict(err) && attempt < 3 {
			continue // a twin committed first: the next run replays it
		}
		return res, err
	}
}

// cartTx runs one attempt of PlaceCart.
func (s *Store) cartTx(ctx context.Context, c Cart) (_ CartResult, err error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return CartResult{}, fmt.Errorf("store: place cart: begin: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	orders := []OrderRequest{c.Order}
	if !s.noTwinLock {
		if err := lockKeys(ctx, tx, orders); err != nil {
			return CartResult{}, err
		}
	}
	saved, err := lookupMany(ctx, tx, orders)
	if err != nil {
		return CartResult{}, err
	}
	var res CartResult
	if sv, ok := saved[outcomeKey{c.Order.UserID, c.Order.IdempotencyKey.String()}]; ok {
		res.Outcome, res.Err = replay(sv, c.Order.Fingerprint)
	} else if res, err = s.sellCart(ctx, tx, c); err != nil {
		return CartResult{}, err
	}
	if err := tx.Commit(ctx); err != nil {
		return CartResult{}, fmt.Errorf("store: place cart: commit: %w", err)
	}
	return res, nil
}

// sellCart decrements every line's stock under a savepoint and inserts the
// order, or undoes the decrements and saves the out-of-stock outcome.
func (s *Store) sellCart(ctx context.Context, tx pgx.Tx, c Cart) (CartResult, error) {
	sp, err := tx.Begin(ctx)
	if err != nil {
		return CartResult{}, fmt.Errorf("store: place cart: savepoint: %w", err)
	}
	lines, left, short, err := s.takeLines(ctx, sp, c)
	if err != nil {
		return CartResult{}, err
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	if len(short) > 0 {
		if err := sp.Rollback(ctx); err != nil {
			return CartResult{}, fmt.Errorf("store: place cart: undo: %w", err)
		}
		out := cartShortOutcome(c, short, now)
		if err := saveShort(ctx, tx, []Outcome{out}); err != nil {
			return CartResult{}, err
		}
		return CartResult{Placed: Placed{Outcome: out, Err: fmt.Errorf("%w: %d of the cart's lines", ErrOutOfStock, len(short))}}, nil
	}
	if err := sp.Commit(ctx); err != nil {
		return CartResult{}, fmt.Errorf("store: place cart: release savepoint: %w", err)
	}
	s.failpoints.Hit(failpoint.AfterDecrement)
	out := cartOrderOutcome(c, lines, now)
	if err := insertCart(ctx, tx, out); err != nil {
		return CartResult{}, err
	}
	return CartResult{Placed: Placed{Outcome: out}, Left: left}, nil
}

// takeLines fences and decrements each line's stock row in turn, and
// returns the lines as sold, the stock each left, and the lines the stock
// could not cover (whose rows were not written).
func (s *Store) takeLines(ctx context.Context, tx pgx.Tx, c Cart) (lines []Line, left []int64, short []ShortLine, err error) {
	lines, left = make([]Line, len(c.Lines)), make([]int64, len(c.Lines))
	var total int64
	for i, l := range c.Lines {
		fence, err := s.fence(ctx, tx, l.Fence, l.FenceKey)
		if err != nil {
			return nil, nil, nil, err
		}
		var price int64
		err = s.stock.Update(ctx, tx, fencing.Update{Key: l.ProductID, Fence: fence,
			Set:       []fencing.Assignment{fencing.Sub("available", l.Quantity)},
			Where:     []fencing.Condition{fencing.Ge("available", l.Quantity)},
			Returning: []string{"available", "price_cents"}}, &left[i], &price)
		switch {
		case errors.Is(err, fencing.ErrConditionFailed):
			sl := ShortLine{ProductID: l.ProductID, Quantity: l.Quantity}
			if err := tx.QueryRow(ctx, `SELECT available FROM product_stock WHERE product_id = $1`, l.ProductID).Scan(&sl.Available); err != nil {
				return nil, nil, nil, fmt.Errorf("store: place cart: read stock: %w", err)
			}
			short = append(short, sl)
			continue
		case errors.Is(err, fencing.ErrNotFound):
			return nil, nil, nil, fmt.Errorf("%w: %q", ErrUnknownProduct, l.ProductID)
		case err != nil:
			return nil, nil, nil, fmt.Errorf("store: place cart: %w", err)
		case price > math.MaxInt64/l.Quantity || total > math.MaxInt64-price*l.Quantity:
			return nil, nil, nil, fmt.Errorf("%w: the cart's amount overflows", ErrInvalid)
		}
		total += price * l.Quantity
		lines[i] = Line{ProductID: l.ProductID, Quantity: l.Quantity, AmountCents: price * l.Quantity, Fence: fence}
	}
	return lines, left, short, nil
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

// insertCart inserts a new cart order: its lines, then the order (product
// NULL for several lines), with its snapshot.
func insertCart(ctx context.Context, tx pgx.Tx, out Outcome) error {
	o := out.Order
	n := len(o.Lines)
	ids, products, qty, amounts, fences := make([]string, n), make([]string, n), make([]int64, n), make([]int64, n), make([]int64, n)
	for i, l := range o.Lines {
		ids[i], products[i], qty[i], amounts[i], fences[i] = o.ID, l.ProductID, l.Quantity, l.AmountCents, l.Fence
	}
	if _, err := tx.Exec(ctx, insertLines, ids, products, qty, amounts, fences); err != nil {
		return fmt.Errorf("store: place cart: insert lines: %w", err)
	}
	_, err := tx.Exec(ctx, `INSERT INTO orders (`+orderColumns+`, response_status, response_body)
VALUES ($1, $2, NULLIF($3, ''), $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)`,
		o.ID, o.UserID, o.ProductID, o.Quantity, o.AmountCents, o.IdempotencyKey, o.Fingerprint, string(o.Status),
		o.Fence, o.CreatedAt, o.UpdatedAt, out.ResponseStatus, out.ResponseBody)
	if err != nil {
		return fmt.Errorf("store: place cart: insert: %w", err)
	}
	return nil
}
