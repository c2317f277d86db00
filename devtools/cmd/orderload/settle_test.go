package main

import (
	"strings"
	"testing"
)

func TestAnsweredCreates(t *testing.T) {
	text := `# HELP orders_http_request_duration_seconds HTTP request durations by route and status code.
# TYPE orders_http_request_duration_seconds histogram
orders_http_request_duration_seconds_bucket{code="201",route="POST /orders",le="0.001"} 3
orders_http_request_duration_seconds_sum{code="201",route="POST /orders"} 12.5
orders_http_request_duration_seconds_count{code="201",route="POST /orders"} 1234
orders_http_request_duration_seconds_count{code="503",route="POST /orders"} 7
orders_http_request_duration_seconds_count{code="200",route="GET /orders/{id}"} 99
orders_queued_requests 0
`
	n, err := answeredCreates(strings.NewReader(text))
	if err != nil || n != 1241 {
		t.Fatalf("got %d, %v; want 1241", n, err)
	}
	if _, err := answeredCreates(strings.NewReader(`orders_http_request_duration_seconds_count{code="201",route="POST /orders"} x`)); err == nil {
		t.Fatal("a bad value passed")
	}
}
