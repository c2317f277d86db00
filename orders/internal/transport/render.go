package transport

import (
	"net/http"
	"time"

	"github.com/quorumlock/quorumlock/orders/internal/answer"
	"github.com/quorumlock/quorumlock/orders/problem"
)

// render turns a create's answer into its reply, with codes for the
// idempotency conflicts.
func (api *API) render(a answer.Answer, key string, codes Codes) Reply {
	switch a.Kind {
	case answer.Outcome:
		r := savedReply(answer.Saved(a.Out))
		if a.Out.Replayed {
			r.Header.Set(HeaderReplayed, "true")
		}
		return r
	case answer.Record:
		r := savedReply(*a.Record)
		r.Header.Set(HeaderReplayed, "true")
		return r
	case answer.InProgress:
		return api.inProgressReply(key, a.Wait, codes)
	case answer.KeyReused:
		if codes == CodesIETF {
			return problemReply(problem.KeyReused())
		}
		return problemReply(problem.FingerprintMismatch())
	case answer.UnknownProduct:
		return problemReply(problem.UnknownProduct(a.Product))
	case answer.Unavailable:
		return problemReply(problem.ServiceUnavailable(a.Detail, a.Wait))
	case answer.OutcomeUnknown:
		return problemReply(problem.OutcomeUnknown(a.Wait))
	case answer.BadKey:
		return problemReply(problem.InvalidIdempotencyKey(a.Detail))
	case answer.NoOutcome:
		return problemReply(problem.NotFound("no completed request with this Idempotency-Key; retry the POST with it"))
	}
	return problemReply(problem.Internal(a.Detail))
}

// inProgressReply answers a request whose key another attempt is
// processing: 202 with Retry-After and the Location to poll, or with
// CodesIETF a 409 problem with the same headers (a POST; the poll always
// answers 202).
func (api *API) inProgressReply(key string, lease time.Duration, codes Codes) Reply {
	wait := min(max(lease, time.Second), api.Retry)
	var r Reply
	if codes == CodesIETF {
		r = problemReply(problem.RequestInProgress(wait))
	} else {
		r = jsonReply(http.StatusAccepted, []byte(`{"status":"IN_PROGRESS"}`))
		r.Header.Set("Retry-After", problem.RetryAfter(wait))
	}
	r.Header.Set("Location", requestLocation(key))
	return r
}
