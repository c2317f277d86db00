package request_test

import (
	"testing"

	"github.com/quorumlock/quorumlock/orders/request"
)

func BenchmarkParse(b *testing.B) {
	body := []byte(`{"productId": "42", "quantity": 1, "addressVersion": "v1", "couponId": null, "traceId": "0af7651916cd43dd8448eb211c80319c"}`)
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, err := request.ParseBytes(body); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkFingerprint(b *testing.B) {
	o := request.Order{ProductID: "42", Quantity: 1, AddressVersion: "v1", CouponID: "SAVE10"}
	for b.Loop() {
		_ = o.Fingerprint()
	}
}
