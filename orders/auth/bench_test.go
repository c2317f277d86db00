package auth_test

import (
	"context"
	"testing"
	"time"
)

func BenchmarkVerify(b *testing.B) {
	v := newVerifier(b)
	h := "Bearer " + mint(b, "u1001", time.Hour, t0())
	ctx := context.Background()
	for b.Loop() {
		if _, err := v.Verify(ctx, h); err != nil {
			b.Fatal(err)
		}
	}
}
