package transport

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/quorumlock/quorumlock/orders/problem"
	"github.com/quorumlock/quorumlock/orders/request"
)

// handleCreate parses a create request, hands it to the create flow, and
// renders and logs the answer.
func (api *API) handleCreate(ctx context.Context, user string, r *http.Request) Reply {
	key, err := request.IdempotencyKey(r.Header)
	if err != nil {
		return problemReply(problem.InvalidIdempotencyKey(reason(err)))
	}
	o, err := request.Parse(r.Body)
	if err != nil {
		if errors.Is(err, request.ErrTooLarge) {
			return problemReply(problem.PayloadTooLarge(request.MaxBodyBytes))
		}
		if errors.Is(err, request.ErrRead) {
			// The read error names socket addresses: log it, answer
			// without it.
			api.Log.Info("request body could not be read", "err", err)
			return problemReply(problem.InvalidRequest("", "the request body could not be read"))
		}
		var re *request.Error
		field := ""
		if errors.As(err, &re) {
			field = re.Field
		}
		return problemReply(problem.InvalidRequest(field, reason(err)))
	}
	start := time.Now()
	a, l := api.Flow.Create(ctx, user, key, o)
	rep := api.render(a, key.String(), api.Codes)
	api.logRequest(ctx, l, user, key, o, rep, time.Since(start))
	return rep
}

func reason(err error) string {
	var re *request.Error
	if errors.As(err, &re) && re.Reason != "" {
		return re.Reason
	}
	return err.Error()
}

// handleRequest answers the saved outcome of a create request, for clients
// that got 202: the saved status and body; 202 again while an attempt holds
// its processing lease; 404 when no attempt left an outcome (see
// create.Flow.Poll).
func (api *API) handleRequest(ctx context.Context, user string, r *http.Request) Reply {
	key, err := request.ParseKey(r.URL.Query().Get("key"))
	if err != nil {
		return problemReply(problem.InvalidIdempotencyKey(reason(err)))
	}
	// The poll always answers an attempt in flight with 202.
	return api.render(api.Flow.Poll(ctx, user, key), key.String(), CodesSeed)
}
