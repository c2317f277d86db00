package store_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/quorumlock/quorumlock/orders/store"
)

func TestNewRefusesNilOption(t *testing.T) {
	// New keeps the pool and does not use it: an unconnected one will do.
	st, err := store.New(new(pgxpool.Pool), store.WithFailpoints(nil), nil)
	if !errors.Is(err, store.ErrInvalid) || !strings.Contains(err.Error(), "option 1 is nil") || st != nil {
		t.Fatalf("New(pool, WithFailpoints(nil), nil) = %v, %v; want an ErrInvalid naming option 1", st, err)
	}
}
