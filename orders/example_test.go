package orders_test

import (
	"context"
	"log"
	"net/http"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/fencing"
	"github.com/quorumlock/quorumlock/orders"
	"github.com/quorumlock/quorumlock/orders/auth"
	"github.com/quorumlock/quorumlock/orders/idem"
	"github.com/quorumlock/quorumlock/orders/store"
	"github.com/quorumlock/quorumlock/quorum"
)

// Example wires the order service the way cmd/ordersd does: five Redis
// masters for the lock and the idempotency fast path, Postgres for the
// fence tokens and the orders.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://quorumlock:quorumlock@127.0.0.1:5432/quorumlock")
	if err != nil {
		log.Fatal(err)
	}
	var nodes []redis.UniversalClient
	for _, addr := range []string{"127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003", "127.0.0.1:7004", "127.0.0.1:7005"} {
		nodes = append(nodes, redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true}))
	}
	// Leases carry fences reserved in Postgres; the order transaction
	// takes each, in the same commit as the write it fences.
	fences, _ := fencing.NewReserver(pool)
	locker, err := quorum.New(nodes, quorum.WithFencer(fences))
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close() // it runs a goroutine per node
	claims, _ := idem.New(nodes)
	st, _ := store.New(pool)
	svc, err := orders.New(st,
		orders.WithLocker(locker),
		orders.WithIdempotency(claims),
		orders.WithFallback(orders.FallbackDB))
	if err != nil {
		log.Fatal(err)
	}
	verifier, _ := auth.NewVerifier([]byte("a secret of at least thirty-two bytes"))
	log.Fatal(http.ListenAndServe("127.0.0.1:8080", svc.Handler(verifier)))
}
