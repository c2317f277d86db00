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

// claim takes the request's Redis claim. done is true when the claim
// decided the answer (a replay, another attempt in flight, a key reused,
// an outcome Postgres found after a takeover); false when the order must be
// placed, l.claimed then saying whether the record is this attempt's.
func (f *Flow) claim(ctx context.Context, l *Log, key request.Key, fp string) (answer.Answer, bool) {
	if f.Idem == nil {
		return answer.Answer{}, false
	}
	res, err := f.Idem.Claim(ctx, l.claimKey, fp, l.owner)
	l.Idem = "UNAVAILABLE"
	if err == nil {
		l.Idem = res.Outcome.String()
	}
	f.Metrics.Claim(l.Idem)
	switch {
	case err != nil && ctx.Err() != nil:
		return answer.Answer{Kind: answer.Unavailable, Detail: "request cancelled", Wait: f.Retry}, true
	case err != nil:
		// The fast path is down: Postgres arbitrates alone. The script
		// may still have run with its reply lost, so the claim is
		// settled anyway; Complete and Release check the owner.
		f.Log.Warn("idempotency claim unavailable; Postgres arbitrates", "err", err)
	case res.Outcome == idem.Success:
		return f.decided(l, "replayed", answer.Answer{Kind: answer.Record, Record: res.Response}), true
	case res.Outcome == idem.InProgress:
		return f.decided(l, "in_progress", answer.Answer{Kind: answer.InProgress, Wait: res.Lease}), true
	case res.Outcome == idem.FingerprintMismatch:
		return f.decided(l, "fingerprint_mismatch", answer.Answer{Kind: answer.KeyReused}), true
	case res.Outcome == idem.Takeover:
		// The previous attempt's processing lease ran out. Postgres says
		// whether it left an outcome before this attempt proceeds.
		if a, done := f.afterTakeover(ctx, l, key, fp); done {
			return a, true
		}
	}
	l.claimed = true
	return answer.Answer{}, false
}

// decided notes that the claim decided the answer a, with result.
func (f *Flow) decided(l *Log, result string, a answer.Answer) answer.Answer {
	l.Place.Result = result
	f.Metrics.Place(result)
	return a
}

// afterTakeover checks Postgres for the outcome of an attempt whose
// processing lease expired. done is false when there is provably none, so
// this attempt may proceed.
func (f *Flow) afterTakeover(ctx context.Context, l *Log, key request.Key, fp string) (answer.Answer, bool) {
	out, err := f.st.Lookup(ctx, l.claimKey.User(), key)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return answer.Answer{}, false
	case err != nil:
		// Neither side can tell what the earlier attempt did: say so, and
		// keep the claim, so the next attempt checks again.
		f.Log.Error("takeover: outcome unknown", "err", err)
		return answer.Answer{Kind: answer.OutcomeUnknown, Wait: f.Idem.Lease()}, true
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if out.Fingerprint != fp {
		_ = f.Idem.Release(sctx, l.claimKey, l.owner)
		return f.decided(l, "fingerprint_mismatch", answer.Answer{Kind: answer.KeyReused}), true
	}
	f.Metrics.Repair()
	a := f.decided(l, "replayed", answer.Answer{Kind: answer.Outcome, Out: out})
	l.Place.Result = "repaired"
	if err := f.Idem.Repair(sctx, l.claimKey, fp, answer.Saved(out)); err != nil {
		f.Log.Warn("takeover: repair of the idempotency record failed", "err", err)
	}
	return a, true
}

// settle records a final answer in Redis, or drops the claim so that a
// retry can proceed.
func (f *Flow) settle(ctx context.Context, l Log, a answer.Answer) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	var err error
	switch l.Verdict {
	case answer.Final:
		err = f.Idem.Complete(ctx, l.claimKey, l.owner, answer.Saved(a.Out))
	case answer.Retryable:
		err = f.Idem.Release(ctx, l.claimKey, l.owner)
	case answer.Unknown:
		// Keep the claim: when its lease expires, the next attempt asks
		// Postgres before it proceeds.
	}
	if err != nil {
		// Postgres holds the truth; the next attempt repairs Redis.
		f.Log.Warn("idempotency record not updated", "verdict", l.Verdict, "err", err)
	}
}
