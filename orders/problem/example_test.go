package problem_test

import (
	"fmt"
	"net/http/httptest"
	"time"

	"github.com/quorumlock/quorumlock/orders/problem"
)

func ExampleWrite() {
	rec := httptest.NewRecorder()
	_ = problem.Write(rec, problem.OutOfStock("42", 1).WithInstance("/orders"))
	fmt.Println(rec.Code, rec.Header().Get("Content-Type"))
	fmt.Println(rec.Body.String())
	// Output:
	// 409 application/problem+json
	// {"type":"tag:quorumlock.github.io,2026:problems/out-of-stock","title":"Out of stock","status":409,"detail":"not enough stock of product \"42\" for quantity 1","instance":"/orders","code":"out_of_stock","productId":"42","quantity":1}
}

func ExampleServiceUnavailable() {
	rec := httptest.NewRecorder()
	_ = problem.Write(rec, problem.ServiceUnavailable("the stock lock quorum is unavailable", 2*time.Second))
	fmt.Println(rec.Code, rec.Header().Get("Retry-After"))
	// Output:
	// 503 2
}

func ExampleEncode() {
	// A saved response (for replay) needs the exact bytes and status.
	p := problem.OutOfStock("42", 1)
	body, _ := problem.Encode(p)
	fmt.Println(problem.StatusOf(p), len(body) > 0)
	// Output:
	// 409 true
}
