package option_test

import (
	"errors"
	"testing"

	"github.com/quorumlock/quorumlock/internal/option"
)

type config struct{ calls []int }

type opt func(*config) error

var errInvalid = errors.New("pkg: invalid argument")

func mark(n int) opt { return func(c *config) error { c.calls = append(c.calls, n); return nil } }

func TestApplyRunsInOrder(t *testing.T) {
	var c config
	if err := option.Apply(&c, []opt{mark(1), mark(2)}, errInvalid); err != nil {
		t.Fatal(err)
	}
	if len(c.calls) != 2 || c.calls[0] != 1 || c.calls[1] != 2 {
		t.Fatalf("calls %v, want [1 2]", c.calls)
	}
	if err := option.Apply[config, opt](&c, nil, errInvalid); err != nil {
		t.Fatalf("no options: %v", err)
	}
}

func TestApplyRefusesNilOption(t *testing.T) {
	var c config
	err := option.Apply(&c, []opt{mark(1), nil, mark(3)}, errInvalid)
	if !errors.Is(err, errInvalid) || err.Error() != "pkg: invalid argument: option 1 is nil" {
		t.Fatalf("err %v, want one wrapping errInvalid naming option 1", err)
	}
	if len(c.calls) != 1 {
		t.Fatalf("calls %v: the options after the nil one must not run", c.calls)
	}
}

func TestApplyStopsAtAnOptionsError(t *testing.T) {
	boom := errors.New("boom")
	var c config
	failing := opt(func(*config) error { return boom })
	if err := option.Apply(&c, []opt{failing, mark(2)}, errInvalid); err != boom {
		t.Fatalf("err %v, want the option's own error", err)
	}
	if len(c.calls) != 0 {
		t.Fatalf("calls %v: the options after the failing one must not run", c.calls)
	}
}
