package create

import (
	"context"
	"errors"
	"time"

	"github.com/quorumlock/quorumlock/orders/idem"
	"github.com/quorumlock/quorumlock/orders/internal/answer"
	"github.com/quorumlock/quorumlock/orders/request"
	"github.com/quorumlock/quorumlock/orders/store"
)

// Poll answers the saved outcome of a create request, for clients that got
// 202: the saved answer; InProgress while an attempt holds its processing
// lease; NoOutcome when no attempt left one. Postgres is asked whenever
// Redis has no final answer, and a found outcome repairs the Redis record.
func (f *Flow) Poll(ctx context.Context, user string, key request.Key) answer.Answer {
	k, err := idem.NewKey(user, key)
	if err != nil {
		f.Log.Error("idempotency key refused", "err", err)
		return answer.Answer{Kind: answer.Internal, Detail: "the request could not be keyed"}
	}
	var rec idem.Record
	haveRec := false
	if f.Idem != nil {
		if rec, err = f.Idem.Get(ctx, k); err == nil {
			haveRec = true
			if rec.State == idem.StateSuccess && rec.Response != nil {
				return answer.Answer{Kind: answer.Record, Record: rec.Response}
			}
		}
	}
	out, err := f.st.Lookup(ctx, user, key)
	switch {
	case err == nil:
		if haveRec {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			if err := f.Idem.Repair(rctx, k, out.Fingerprint, answer.Saved(out)); err != nil {
				f.Log.Warn("poll: repair of the idempotency record failed", "err", err)
			}
			cancel()
		}
		return answer.Answer{Kind: answer.Outcome, Out: out}
	case !errors.Is(err, store.ErrNotFound):
		return answer.Answer{Kind: answer.Unavailable, Detail: "the order database is unavailable", Wait: f.Retry}
	case haveRec && rec.State == idem.StateInProgress && rec.LeaseLeft > 0:
		// LeaseLeft is measured on the node's clock, so a skew between
		// this host and the node does not turn a live attempt into a 404.
		return answer.Answer{Kind: answer.InProgress, Wait: rec.LeaseLeft}
	}
	return answer.Answer{Kind: answer.NoOutcome}
}
