package main

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/quorumlock/quorumlock/orders/problem"
)

// kind is the column an answer is counted in.
type kind int

// The kinds of answer, in the report's order.
const (
	kindCreated  kind = iota // 201: an order
	kindConflict             // 409: out of stock, or a key reused
	kindShedRA               // 503 with a Retry-After
	kindShedNoRA             // 503 without one
	kindTimeout              // no answer within -timeout
	kindOther                // anything else: another status, or a transport error
	numKinds
)

// answer is what one request came to.
type answer struct {
	kind kind
	// uncertain is set when the client cannot know whether the request
	// took effect: no answer, a 202 (still in flight), or a server error
	// other than a 503 service_unavailable (which writes nothing). The
	// database may hold an order for such a request, and need not.
	uncertain bool
	// label names an answer of kindOther ("500 internal_error",
	// "transport error"), else "".
	label string
}

// Labels of the answers that carry no status.
const (
	labelTransport = "transport error"
	labelCancelled = "cancelled"
)

// classify names an HTTP answer: its status, its problem document's code
// ("" without one) and whether it carried a Retry-After.
func classify(status int, code string, hasRetryAfter bool) answer {
	switch {
	case status == http.StatusCreated:
		return answer{kind: kindCreated}
	case status == http.StatusConflict:
		return answer{kind: kindConflict}
	case status == http.StatusServiceUnavailable:
		a := answer{kind: kindShedNoRA, uncertain: code != problem.CodeServiceUnavailable}
		if hasRetryAfter {
			a.kind = kindShedRA
		}
		return a
	}
	label := strconv.Itoa(status)
	if code != "" {
		label += " " + code
	}
	return answer{kind: kindOther, label: label, uncertain: status == http.StatusAccepted || status >= 500}
}

// noAnswer names a request that got no answer: a timeout when the
// client's wait ran out, a cancellation when the run was interrupted, else
// a transport error.
func noAnswer(timedOut, cancelled bool) answer {
	switch {
	case cancelled:
		return answer{kind: kindOther, label: labelCancelled, uncertain: true}
	case timedOut:
		return answer{kind: kindTimeout, uncertain: true}
	}
	return answer{kind: kindOther, label: labelTransport, uncertain: true}
}

// problemCode is the code of a problem document, or "".
func problemCode(status int, body []byte) string {
	if status < 400 {
		return ""
	}
	var p struct {
		Code string `json:"code"`
	}
	if json.Unmarshal(body, &p) != nil {
		return ""
	}
	return p.Code
}
