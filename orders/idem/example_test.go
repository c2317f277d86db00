package idem_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/orders/idem"
	"github.com/quorumlock/quorumlock/orders/request"
)

func ExampleNewKey() {
	k, _ := idem.NewKey("u1001", request.MustKey("req-001"))
	fmt.Println(k)
	// A ':' in the user id is escaped, so it cannot reach into another
	// user's namespace.
	a, _ := idem.NewKey("a:b", request.MustKey("c"))
	b, _ := idem.NewKey("a", request.MustKey("b:c"))
	fmt.Println(a, b)
	// Output:
	// idem:orders:u1001:req-001
	// idem:orders:a%3Ab:c idem:orders:a:b:c
}

// Example shows the flow of one POST /orders attempt. It needs Redis
// masters at the addresses shown, so it is compiled but not run.
func Example() {
	ctx := context.Background()
	var nodes []redis.UniversalClient
	for _, addr := range []string{"127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003"} {
		nodes = append(nodes, redis.NewClient(&redis.Options{Addr: addr}))
	}
	store, err := idem.New(nodes, idem.WithTTL(24*time.Hour), idem.WithLease(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	k, err := idem.NewKey("u1001", request.MustKey("req-001"))
	if err != nil {
		log.Fatal(err)
	}
	fingerprint := "d97da156f58deb034159672be502751e13beb9c99d340a2fc1212d7348223514"
	owner := idem.NewOwner()

	r, err := store.Claim(ctx, k, fingerprint, owner)
	if errors.Is(err, idem.ErrUnavailable) || errors.Is(err, idem.ErrCorrupt) {
		// Fast path unavailable: Postgres (UNIQUE(user_id, idempotency_key)) decides alone.
		return
	}
	if err != nil {
		log.Fatal(err)
	}
	switch r.Outcome {
	case idem.Success:
		fmt.Println("replay", r.Response.Status, len(r.Response.Body))
	case idem.InProgress:
		fmt.Println("202, Retry-After", r.Lease)
	case idem.FingerprintMismatch:
		fmt.Println("409 problem")
	case idem.Takeover:
		// An earlier attempt ran out of lease: ask Postgres first. If the
		// order exists, store.Repair(ctx, k, fp, resp) and replay it.
		fallthrough
	case idem.Created:
		resp := idem.Response{Status: 201, ContentType: "application/json", Body: []byte(`{"orderId":"o1"}`)}
		// ... lock, one transaction in Postgres, then:
		if err := store.Complete(ctx, k, owner, resp); err != nil {
			// Postgres already holds the truth; a later retry repairs Redis.
			log.Print(err)
		}
		// On a validation error or a transient failure before any write:
		//   store.Release(ctx, k, owner)
	}
}
