package lease

import "context"

// Fencer issues fence tokens: for each key, every call returns a number
// strictly greater than any it returned before for that key, even across
// restarts; or, reserving, the key's next token, which the write itself takes
// so that at most one write commits each (fencing.Reserver). Given to a Locker
// (quorum.WithFencer, etcdlock.WithFencer), it gives every lease a Fence; the
// resource must reject a write whose fence is not above the last it saw,
// making a late holder harmless (the lock cannot).
type Fencer interface {
	Next(ctx context.Context, key string) (int64, error)
}
