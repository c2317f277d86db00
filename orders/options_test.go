package orders_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/quorumlock/quorumlock/orders"
	"github.com/quorumlock/quorumlock/orders/store"
)

func TestNewRefusesNilOption(t *testing.T) {
	// Neither New keeps more than the pool: an unconnected one will do.
	st, err := store.New(new(pgxpool.Pool))
	if err != nil {
		t.Fatal(err)
	}
	svc, err := orders.New(st, orders.WithBatchLimit(4), nil)
	if !errors.Is(err, orders.ErrConfig) || !strings.Contains(err.Error(), "option 1 is nil") || svc != nil {
		t.Fatalf("New(st, WithBatchLimit(4), nil) = %v, %v; want an ErrConfig naming option 1", svc, err)
	}
}
