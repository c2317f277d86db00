package placement

// Fallback says what the placer does when the lock cannot be taken.
type Fallback string

// Fallback modes.
const (
	// FallbackDB lets Postgres arbitrate alone: the order transaction takes
	// its fence itself, and the conditional decrement still holds.
	FallbackDB Fallback = "db"
	// FallbackReject answers 503 with Retry-After.
	FallbackReject Fallback = "reject"
)

// Stock lock keys are "stock:" + product id; the fence counter of a
// product's stock has the same key.
func stockKey(productID string) string { return "stock:" + productID }

// LockRule says which batches take the stock lock.
type LockRule string

// Lock rules.
const (
	// LockContended locks the batches of contended products only: a quiet
	// product's order is placed with the fence Postgres takes in the
	// transaction, and its conditional decrement, which keep it safe
	// without the lock's round trips.
	LockContended LockRule = "contended"
	// LockAlways locks every batch.
	LockAlways LockRule = "always"
)
