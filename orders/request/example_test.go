package request_test

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/quorumlock/quorumlock/orders/request"
)

func ExampleParse() {
	o, err := request.Parse(strings.NewReader(`{"productId": 42, "quantity": 1, "addressVersion": "v1", "traceId": "t-1"}`))
	if err != nil {
		panic(err)
	}
	fmt.Printf("%+v\n", o)
	fmt.Println(string(o.Canonical()))
	fmt.Println(o.Fingerprint())
	// Output:
	// {ProductID:42 Quantity:1 AddressVersion:v1 CouponID: Items:[]}
	// {"productId":"42","quantity":1,"addressVersion":"v1","couponId":null}
	// d97da156f58deb034159672be502751e13beb9c99d340a2fc1212d7348223514
}

// A cart: the lines in any order, a line repeated verbatim counted once.
// Both bodies are the same order, with the same fingerprint.
func ExampleParse_cart() {
	a, err := request.Parse(strings.NewReader(`{"items": [{"productId": 42, "quantity": 1}, {"quantity": 2, "productId": "7"}], "addressVersion": "v1"}`))
	if err != nil {
		panic(err)
	}
	b, err := request.Parse(strings.NewReader(`{"addressVersion": "v1", "items": [{"productId": "7", "quantity": 2}, {"productId": "42", "quantity": 1}, {"productId": "7", "quantity": 2}]}`))
	if err != nil {
		panic(err)
	}
	fmt.Println(a.Items, a.Units())
	fmt.Println(string(a.Canonical()))
	fmt.Println(a.Fingerprint() == b.Fingerprint())
	// Output:
	// [{42 1} {7 2}] 3
	// {"items":[{"productId":"42","quantity":1},{"productId":"7","quantity":2}],"addressVersion":"v1","couponId":null}
	// true
}

func ExampleParse_errors() {
	_, err := request.Parse(strings.NewReader(`{"productId": "42", "quantity": 0, "addressVersion": "v1"}`))
	var re *request.Error
	if errors.As(err, &re) && errors.Is(err, request.ErrInvalidField) {
		fmt.Printf("400: field %s %s\n", re.Field, re.Reason)
	}
	_, err = request.Parse(strings.NewReader(strings.Repeat(" ", request.MaxBodyBytes+1)))
	fmt.Println(errors.Is(err, request.ErrTooLarge))
	// Output:
	// 400: field quantity must be an integer from 1 to 1000
	// true
}

func ExampleIdempotencyKey() {
	h := http.Header{}
	h.Set("Idempotency-Key", "req-001")
	key, err := request.IdempotencyKey(h)
	fmt.Println(key, err)

	_, err = request.IdempotencyKey(http.Header{})
	fmt.Println(errors.Is(err, request.ErrMissingIdempotencyKey))
	// Output:
	// req-001 <nil>
	// true
}
