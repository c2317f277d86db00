package transport

import (
	"log/slog"
	"net/http"
	"net/url"

	"github.com/quorumlock/quorumlock/orders/idem"
	"github.com/quorumlock/quorumlock/orders/problem"
)

// Headers of the HTTP contract.
const (
	HeaderIdempotencyKey = "Idempotency-Key"
	HeaderReplayed       = "Idempotent-Replayed"
)

// Reply is a complete HTTP answer: status, headers and body bytes.
type Reply struct {
	Status int
	Header http.Header
	Body   []byte
}

// jsonReply is a status and a JSON body; the content type follows from the
// status (a problem for errors, plain JSON for successes).
func jsonReply(status int, body []byte) Reply {
	h := http.Header{}
	if status >= 400 {
		h.Set("Content-Type", problem.ContentType)
	} else {
		h.Set("Content-Type", "application/json")
	}
	return Reply{Status: status, Header: h, Body: body}
}

func problemReply(p problem.Problem) Reply {
	body, err := problem.Encode(p)
	if err != nil {
		body = []byte(`{"status":500,"title":"Internal Server Error"}`)
	}
	h := http.Header{}
	for k, v := range p.Header {
		h[k] = append([]string(nil), v...)
	}
	h.Set("Content-Type", problem.ContentType)
	return Reply{Status: problem.StatusOf(p), Header: h, Body: body}
}

// savedReply is a saved answer as a reply: its content type follows from
// its status, for first answers and replays alike (a content type kept
// beside a snapshot is never sent back verbatim).
func savedReply(r idem.Response) Reply {
	rep := jsonReply(r.Status, r.Body)
	if r.Location != "" {
		rep.Header.Set("Location", r.Location)
	}
	return rep
}

// requestLocation is where a client polls a request still in progress.
// The key travels in the query, so keys such as ".." survive path cleaning.
func requestLocation(key string) string {
	return "/orders/requests?" + url.Values{"key": {key}}.Encode()
}

func write(w http.ResponseWriter, r Reply, log *slog.Logger) {
	for k, v := range r.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(r.Status)
	if _, err := w.Write(r.Body); err != nil {
		log.Debug("write response", "err", err)
	}
}
