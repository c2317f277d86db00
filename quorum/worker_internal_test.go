package quorum

import (
	"context"
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestRanLater: a request that failed with NOSCRIPT is run again only when
// no later request of its batch on the same key ran.
func TestRanLater(t *testing.T) {
	ctx := context.Background()
	noScript := errors.New("NOSCRIPT No matching script. Please use EVAL.")
	req := func(key string) *call { return &call{req: request{key: key, keys: []string{key}}} }
	cmd := func(err error) *redis.Cmd {
		c := redis.NewCmd(ctx)
		if err != nil {
			c.SetErr(err)
		}
		return c
	}
	live := []*call{req("a"), req("b"), req("a"), req("c")}
	for _, tc := range []struct {
		name string
		errs []error
		j    int
		want bool
	}{
		{"a later request on the key ran", []error{noScript, nil, nil, nil}, 0, true},
		{"the later request on the key failed too", []error{noScript, nil, noScript, nil}, 0, false},
		{"no later request on the key", []error{nil, noScript, nil, nil}, 1, false},
		{"the last request", []error{nil, nil, nil, noScript}, 3, false},
		{"a later one on the key failed otherwise, so it ran", []error{noScript, nil, errors.New("ERR something"), nil}, 0, true},
	} {
		cmds := make([]*redis.Cmd, len(tc.errs))
		for i, e := range tc.errs {
			cmds[i] = cmd(e)
		}
		if got := ranLater(live, cmds, tc.j); got != tc.want {
			t.Errorf("%s: ranLater = %v, want %v", tc.name, got, tc.want)
		}
	}
}
