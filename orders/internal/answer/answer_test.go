package answer_test

import (
	"testing"

	"github.com/quorumlock/quorumlock/orders/internal/answer"
	"github.com/quorumlock/quorumlock/orders/problem"
	"github.com/quorumlock/quorumlock/orders/store"
)

// A saved outcome is kept and sent with the content type its status calls
// for, and a created order's 201 with its Location; a rejection has none.
func TestSaved(t *testing.T) {
	created := store.Outcome{Kind: store.OutcomeOrder, ResponseStatus: 201, ResponseBody: []byte(`{"orderId":"ord_1"}`),
		Order: store.Order{ID: "ord_1"}}
	short := store.Outcome{Kind: store.OutcomeOutOfStock, ResponseStatus: 409, ResponseBody: []byte(`{"status":409}`)}
	for name, c := range map[string]struct {
		out     store.Outcome
		ct, loc string
	}{
		"created":      {created, "application/json", "/orders/ord_1"},
		"out of stock": {short, problem.ContentType, ""},
	} {
		r := answer.Saved(c.out)
		if r.Status != c.out.ResponseStatus || string(r.Body) != string(c.out.ResponseBody) || r.ContentType != c.ct || r.Location != c.loc {
			t.Errorf("%s: %+v, want content type %q and location %q", name, r, c.ct, c.loc)
		}
	}
}

func TestVerdictNames(t *testing.T) {
	for v, want := range map[answer.Verdict]string{answer.Retryable: "retryable", answer.Final: "final", answer.Unknown: "unknown"} {
		if v.String() != want {
			t.Errorf("%d: %q, want %q", v, v.String(), want)
		}
	}
}
