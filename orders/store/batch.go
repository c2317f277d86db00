package store

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/quorumlock/quorumlock/fencing"
	"github.com/quorumlock/quorumlock/internal/failpoint"
	"github.com/quorumlock/quorumlock/orders/request"
)

// MaxBatch is the most orders [Store.PlaceBatch] places in one transaction.
const MaxBatch = 256

// OrderRequest is one order of a [Batch]: who asks, under which key, for how
// many units, and the id a new order gets.
type OrderRequest struct {
	// UserID is the authenticated user (1 to request.MaxUserIDLen bytes).
	UserID string
	// IdempotencyKey is the client's key, checked where it entered.
	IdempotencyKey request.Key
	// Fingerprint identifies the request's business content.
	Fingerprint string
	// Quantity is request.MinQuantity to request.MaxQuantity.
	Quantity int64
	// OrderID is the id a new order gets (1 to MaxRefLen bytes); a replay
	// keeps the saved order's.
	OrderID string
}

// Batch is the input of [Store.PlaceBatch]: orders for one product, served
// in the order given.
type Batch struct {
	// ProductID is 1 to request.MaxIDLen bytes.
	ProductID string
	// Orders holds 1 to MaxBatch orders.
	Orders []OrderRequest
	// Fence and FenceKey say how the transaction is fenced:
	//   - Fence > 0 and FenceKey set: a token reserved by a
	//     fencing.Reserver (a lease's Fence), taken on FenceKey's counter
	//     in the transaction (fencing.Take); a token taken since makes the
	//     batch stale;
	//   - Fence > 0 and no FenceKey: a token already taken (an Issuer's);
	//   - Fence 0: the transaction takes the next token of FenceKey itself
	//     (Postgres arbitrates alone), so concurrent writers get theirs in
	//     the order they reach the counter and never make each other stale.
	// Either way the stock row accepts the write only with a fence above
	// the last one it saw.
	Fence    int64
	FenceKey string
	// Snapshot renders the response saved with a new outcome (a created
	// order, or an out-of-stock rejection) and replayed byte for byte. The
	// store keeps it as data.
	Snapshot func(Outcome) Snapshot
}

// BatchResult is what [Store.PlaceBatch] did: one result per order, in
// the batch's order, and the stock left.
type BatchResult struct {
	Orders []Placed
	// Left is the product's available stock after the batch, or -1 when
	// every order was answered from a saved outcome (the stock was not
	// read).
	Left int64
}

// Placed is the result of one order of a batch: its outcome and nil (a new
// or replayed order), ErrOutOfStock (a new or replayed rejection, whose
// snapshot is in the outcome) or ErrFingerprintMismatch (the key was used
// for another request; nothing written).
type Placed struct {
	Outcome Outcome
	Err     error
}

func (b Batch) validate() error {
	if err := checkText("product id", b.ProductID, request.MaxIDLen); err != nil {
		return err
	}
	if len(b.Orders) == 0 || len(b.Orders) > MaxBatch {
		return fmt.Errorf("%w: %d orders in a batch, want 1..%d", ErrInvalid, len(b.Orders), MaxBatch)
	}
	for _, o := range b.Orders {
		if err := o.validate(); err != nil {
			return err
		}
	}
	switch {
	case b.Snapshot == nil:
		return fmt.Errorf("%w: no snapshot renderer", ErrInvalid)
	case b.Fence < 0:
		return fmt.Errorf("%w: fence %d is negative", ErrInvalid, b.Fence)
	case b.Fence == 0 && b.FenceKey == "":
		return fmt.Errorf("%w: neither a fence nor a fence key", ErrInvalid)
	}
	return nil
}

func (o OrderRequest) validate() error {
	if err := checkText("user id", o.UserID, request.MaxUserIDLen); err != nil {
		return err
	}
	if o.IdempotencyKey.IsZero() {
		return fmt.Errorf("%w: no idempotency key", ErrInvalid)
	}
	if err := checkText("fingerprint", o.Fingerprint, MaxFingerprintLen); err != nil {
		return err
	}
	if o.Quantity < request.MinQuantity || o.Quantity > request.MaxQuantity {
		return fmt.Errorf("%w: quantity %d is outside %d..%d", ErrInvalid, o.Quantity, request.MinQuantity, request.MaxQuantity)
	}
	return checkText("order id", o.OrderID, MaxRefLen)
}

// PlaceBatch places the orders of b in one transaction, first come, first
// served, and returns one result per order, in b's order:
//
//  1. Every (user, idempotency key) of the batch is locked, in a fixed
//     order, on a transaction-scoped advisory lock, and the saved outcome
//     of each is read: a saved order or rejection is replayed (the same
//     fingerprint) or refused (ErrFingerprintMismatch). A key given twice
//     in the batch gets the first request's answer.
//  2. The fence is taken as Batch.Fence says, and the stock row claimed
//     with it (fencing.Table.Claim): a stale fence fails the whole batch
//     with ErrStaleFence, an unknown product with ErrUnknownProduct,
//     nothing written.
//  3. The new orders take the stock in turn while it lasts; one fenced
//     conditional decrement takes their total, the orders are inserted
//     under UNIQUE(user_id, idempotency_key), and the others get a saved
//     out-of-stock outcome. Each new outcome is saved with its snapshot.
//
// Other errors leave the database as it was unless the commit itself was
// interrupted; [Store.Lookup] then tells, per key.
func (s *Store) PlaceBatch(ctx context.Context, b Batch) (BatchResult, error) {
	if err := b.validate(); err != nil {
		return BatchResult{}, err
	}
	for attempt := 1; ; attempt++ {
		out, err := s.batchTx(ctx, b)
		if isIdempotencyConflict(err) && attempt < 3 {
			// A twin committed one of the keys first (the advisory lock
			// was skipped): the next run finds its outcome.
			continue
		}
		return out, err
	}
}

// batchTx runs one attempt of PlaceBatch. A unique violation on (user_id,
// idempotency_key) is returned as is, after rollback.
func (s *Store) batchTx(ctx context.Context, b Batch) (_ BatchResult, err error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return BatchResult{}, fmt.Errorf("store: place orders: begin: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	if !s.noTwinLock {
		if err := lockKeys(ctx, tx, b.Orders); err != nil {
			return BatchResult{}, err
		}
	}
	out, fresh, err := replays(ctx, tx, b)
	if err != nil {
		return BatchResult{}, err
	}
	left := int64(-1)
	if len(fresh) > 0 {
		if left, err = s.take(ctx, tx, b, out, fresh); err != nil {
			return BatchResult{}, err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return BatchResult{}, fmt.Errorf("store: place orders: commit: %w", err)
	}
	return BatchResult{Orders: out, Left: left}, nil
}

// lockKeys takes the advisory lock of every (user, key) of orders, sorted,
// so that batches sharing keys never deadlock.
func lockKeys(ctx context.Context, tx pgx.Tx, orders []OrderRequest) error {
	type pair struct{ u, k string }
	ps := make([]pair, len(orders))
	for i, o := range orders {
		ps[i] = pair{o.UserID, o.IdempotencyKey.String()}
	}
	slices.SortFunc(ps, func(a, b pair) int {
		if a.u != b.u {
			return compare(a.u, b.u)
		}
		return compare(a.k, b.k)
	})
	ps = slices.Compact(ps)
	users, keys := make([]string, len(ps)), make([]string, len(ps))
	for i, p := range ps {
		users[i], keys[i] = p.u, p.k
	}
	_, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext(u), hashtext(k))
FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS t(u, k, n) ORDER BY n`, users, keys)
	if err != nil {
		return fmt.Errorf("store: place orders: lock keys: %w", err)
	}
	return nil
}

func compare(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// replays fills the results of the orders that have a saved outcome, or
// repeat an earlier key of the batch, and returns the indexes of the
// others, in order. A repeated key's result is filled in by take, after
// the first one's.
func replays(ctx context.Context, tx pgx.Tx, b Batch) ([]Placed, []int, error) {
	out := make([]Placed, len(b.Orders))
	saved, err := lookupMany(ctx, tx, b.Orders)
	if err != nil {
		return nil, nil, err
	}
	first := map[outcomeKey]int{}
	var fresh []int
	for i, o := range b.Orders {
		k := outcomeKey{o.UserID, o.IdempotencyKey.String()}
		if sv, ok := saved[k]; ok {
			out[i].Outcome, out[i].Err = replay(sv, o.Fingerprint)
			continue
		}
		if _, dup := first[k]; dup {
			continue // answered after the first one
		}
		first[k] = i
		fresh = append(fresh, i)
	}
	return out, fresh, nil
}

// take fences the batch, gives the fresh orders their stock in turn, and
// saves every new outcome; then answers the repeated keys. It returns the
// stock left.
func (s *Store) take(ctx context.Context, tx pgx.Tx, b Batch, out []Placed, fresh []int) (int64, error) {
	fence, err := s.fence(ctx, tx, b.Fence, b.FenceKey)
	if err != nil {
		return 0, err
	}
	// Claim the stock row with the fence (recording it, so that only this
	// fence may write it next), if it has enough for the smallest order:
	// when it has not, every order is short, and neither the stock nor
	// its fence moves.
	least := b.Orders[fresh[0]].Quantity
	for _, i := range fresh {
		least = min(least, b.Orders[i].Quantity)
	}
	var available, price int64
	err = s.stock.Update(ctx, tx, fencing.Update{Key: b.ProductID, Fence: fence,
		Where: []fencing.Condition{fencing.Ge("available", least)}, Returning: []string{"available", "price_cents"}},
		&available, &price)
	switch {
	case errors.Is(err, fencing.ErrNotFound):
		return 0, fmt.Errorf("%w: %q", ErrUnknownProduct, b.ProductID)
	case errors.Is(err, fencing.ErrStaleFence):
		return 0, fmt.Errorf("store: place orders: %w", err)
	case errors.Is(err, fencing.ErrConditionFailed):
		// Not even the smallest order fits: all are short, and what is
		// left is read for the caller.
		if err := tx.QueryRow(ctx, `SELECT available FROM product_stock WHERE product_id = $1`, b.ProductID).Scan(&available); err != nil {
			return 0, fmt.Errorf("store: place orders: read stock: %w", err)
		}
	case err != nil:
		return 0, fmt.Errorf("store: place orders: claim stock: %w", err)
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	var made, short []int // indexes into b.Orders
	left := available
	for _, i := range fresh {
		o := b.Orders[i]
		if o.Quantity > left {
			out[i].Outcome, out[i].Err = shortOutcome(b, o, now), outOfStockErr(b.ProductID, o.Quantity)
			short = append(short, i)
			continue
		}
		if price > math.MaxInt64/o.Quantity {
			return 0, fmt.Errorf("%w: amount %d x %d overflows", ErrInvalid, price, o.Quantity)
		}
		left -= o.Quantity
		out[i].Outcome = newOrderOutcome(b, o, price, fence, now)
		made = append(made, i)
	}
	if err := s.sell(ctx, tx, b, fence, available-left, pick(out, made)); err != nil {
		return 0, err
	}
	if err := saveShort(ctx, tx, pick(out, short)); err != nil {
		return 0, err
	}
	answerRepeats(b, out)
	return left, nil
}

// fence returns the token of a write to one stock row, taken as
// Batch.Fence says of fence and key.
func (s *Store) fence(ctx context.Context, tx pgx.Tx, fence int64, key string) (int64, error) {
	switch {
	case fence > 0 && key != "":
		if err := fencing.Take(ctx, tx, key, fence); err != nil {
			return 0, fmt.Errorf("store: place orders: %w", err)
		}
		return fence, nil
	case fence > 0:
		return fence, nil
	}
	iss, err := fencing.NewIssuer(tx)
	if err != nil {
		return 0, err
	}
	f, err := iss.Next(ctx, key)
	if err != nil {
		return 0, fmt.Errorf("store: place orders: %w", err)
	}
	return f, nil
}

// sell takes total units of the claimed stock row and inserts the new
// orders, with their snapshots.
func (s *Store) sell(ctx context.Context, tx pgx.Tx, b Batch, fence, total int64, made []Outcome) error {
	if total == 0 {
		return nil
	}
	err := s.stock.Update(ctx, tx, fencing.Update{
		Key: b.ProductID, Fence: fence, Claimed: true,
		Set:   []fencing.Assignment{fencing.Sub("available", total)},
		Where: []fencing.Condition{fencing.Ge("available", total)},
	})
	if err != nil {
		return fmt.Errorf("store: place orders: take stock: %w", err)
	}
	s.failpoints.Hit(failpoint.AfterDecrement)
	cols := orderRows(made)
	// The lines first: the order's creation event reads them.
	_, err = tx.Exec(ctx, insertLines, cols[0], cols[2], cols[3], cols[4], cols[8])
	if err != nil {
		return fmt.Errorf("store: place orders: insert lines: %w", err)
	}
	_, err = tx.Exec(ctx, `INSERT INTO orders (`+orderColumns+`, response_status, response_body)
SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::bigint[], $6::text[], $7::text[],
  $8::text[], $9::bigint[], $10::timestamptz[], $11::timestamptz[], $12::int[], $13::bytea[])`, cols...)
	if err != nil {
		return fmt.Errorf("store: place orders: insert: %w", err)
	}
	return nil
}
