package events_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/orders/events"
)

// noDB is a DB that is never called.
type noDB struct{ events.DB }

func TestNilOptionIsRefused(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never contacted
	defer func() { _ = rdb.Close() }()
	filter, err := events.NewMemoryFilter(100, 0.01)
	if err != nil {
		t.Fatal(err)
	}
	handle := func(context.Context, events.Event) error { return nil }
	check := func(what string, err error, pos string) {
		t.Helper()
		if !errors.Is(err, events.ErrConfig) || !strings.Contains(err.Error(), "option "+pos+" is nil") {
			t.Errorf("%s: err = %v, want ErrConfig naming option %s", what, err, pos)
		}
	}
	_, err = events.NewRelay(noDB{}, rdb, nil)
	check("NewRelay", err, "0")
	_, err = events.NewApproximate(rdb, filter, "g", "c1", handle, events.WithBatch(10), nil)
	check("NewApproximate", err, "1")
}
