package fakepay

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/quorumlock/quorumlock/orders/payment"
	"github.com/quorumlock/quorumlock/orders/problem"
)

// Header names of the API.
const (
	// IdempotencyKeyHeader carries the payment request id of a charge.
	IdempotencyKeyHeader = "Idempotency-Key"
	// ReplayedHeader is "true" on the answer to a repeated charge.
	ReplayedHeader = "Idempotent-Replayed"
)

// Problem codes of the API, besides those of package problem.
const (
	// CodeKeyMismatch (422): the Idempotency-Key was used with another
	// order or amount.
	CodeKeyMismatch = "idempotency_key_mismatch"
	// CodeNotPending (409): only a PENDING charge can be completed.
	CodeNotPending = "not_pending"
)

// maxBody bounds request bodies.
const maxBody = 64 << 10

// ChargeBody is the body of POST /charges.
type ChargeBody struct {
	OrderID     string `json:"order_id"`
	AmountCents int64  `json:"amount_cents"`
}

// CompleteBody is the body of POST /charges/{key}/complete.
type CompleteBody struct {
	Status payment.Status `json:"status"`
}

// FaultBody is the body of POST /faults. An omitted or zero Count is 1.
type FaultBody struct {
	Key   string `json:"key"`
	Fault Fault  `json:"fault"`
	Count int    `json:"count,omitempty"`
}

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /charges", s.handleCharge)
	mux.HandleFunc("GET /charges/{key}", s.handleGet)
	mux.HandleFunc("POST /charges/{key}/complete", s.handleComplete)
	mux.HandleFunc("POST /faults", s.handleFaults)
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, s.Stats())
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok\n")
	})
	return mux
}

func (s *Server) handleCharge(w http.ResponseWriter, r *http.Request) {
	keys := r.Header.Values(IdempotencyKeyHeader)
	if len(keys) != 1 || !validKey(keys[0]) {
		writeProblem(w, problem.InvalidIdempotencyKey(fmt.Sprintf(
			"send one %s header of 1 to %d visible ASCII characters", IdempotencyKeyHeader, MaxKeyLen)))
		return
	}
	key := keys[0]
	var body ChargeBody
	if p, ok := decode(w, r, &body); !ok {
		writeProblem(w, p)
		return
	}
	switch {
	case body.OrderID == "" || len(body.OrderID) > MaxKeyLen:
		writeProblem(w, problem.InvalidRequest("order_id", fmt.Sprintf("order_id must have 1 to %d bytes", MaxKeyLen)))
		return
	case body.AmountCents <= 0:
		writeProblem(w, problem.InvalidRequest("amount_cents", "amount_cents must be a positive integer"))
		return
	}
	res, err := s.charge(key, body.OrderID, body.AmountCents)
	if res.fault == FaultDrop || res.fault == FaultLoseReply {
		hangUp(w)
		return
	}
	if err != nil {
		s.writeError(w, err)
		return
	}
	if res.replayed {
		w.Header().Set(ReplayedHeader, "true")
	}
	writeJSON(w, http.StatusOK, res.charge)
}

func (s *Server) handleGet(w http.ResponseWriter, r *http.Request) {
	c, err := s.Lookup(r.PathValue("key"))
	if err != nil {
		s.writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, c)
}

func (s *Server) handleComplete(w http.ResponseWriter, r *http.Request) {
	var body CompleteBody
	if p, ok := decode(w, r, &body); !ok {
		writeProblem(w, p)
		return
	}
	if body.Status != payment.StatusSucceeded && body.Status != payment.StatusFailed {
		writeProblem(w, problem.InvalidRequest("status", "status must be SUCCEEDED or FAILED"))
		return
	}
	c, err := s.Complete(r.PathValue("key"), body.Status)
	if err != nil {
		s.writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, c)
}

func (s *Server) handleFaults(w http.ResponseWriter, r *http.Request) {
	var body FaultBody
	if p, ok := decode(w, r, &body); !ok {
		writeProblem(w, p)
		return
	}
	if body.Count == 0 {
		body.Count = 1
	}
	if err := s.Inject(body.Key, body.Fault, body.Count); err != nil {
		s.writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, body)
}

// decode reads one JSON object with known fields only into dst.
func decode(w http.ResponseWriter, r *http.Request, dst any) (problem.Problem, bool) {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return problem.PayloadTooLarge(maxBody), false
		}
		return problem.InvalidRequest("", "the body is not a valid JSON object of this request: "+err.Error()), false
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return problem.InvalidRequest("", "the body has data after the JSON object"), false
	}
	return problem.Problem{}, true
}

// hangUp closes the connection without an answer.
func hangUp(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		// Not hijackable (HTTP/2, a recorder): abort the response, which
		// the server turns into a reset connection or stream.
		panic(http.ErrAbortHandler)
	}
	_ = conn.Close()
}

// writeError answers err as a problem.
func (s *Server) writeError(w http.ResponseWriter, err error) {
	var p problem.Problem
	switch {
	case errors.Is(err, ErrNotFound):
		p = problem.NotFound(err.Error())
	case errors.Is(err, ErrMismatch):
		p = problem.New(http.StatusUnprocessableEntity, CodeKeyMismatch, "Idempotency-Key reused", err.Error())
	case errors.Is(err, ErrNotPending):
		p = problem.New(http.StatusConflict, CodeNotPending, "Charge not pending", err.Error())
	case errors.Is(err, ErrInvalid):
		p = problem.InvalidRequest("", err.Error())
	case errors.Is(err, ErrClosed):
		p = problem.ServiceUnavailable("the provider is shutting down", 0)
	default:
		s.log.Error("fakepay: request failed", "err", err)
		p = problem.Internal("the provider could not record the change")
	}
	writeProblem(w, p)
}

func writeProblem(w http.ResponseWriter, p problem.Problem) {
	_ = problem.Write(w, p)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeProblem(w, problem.Internal("encode the answer: "+err.Error()))
		return
	}
	b = append(b, '\n')
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
