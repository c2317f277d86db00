package failpoint

import (
	"errors"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	good := map[string]string{
		"":                "",
		"  ":              "",
		"after-lock=kill": "after-lock=kill",
		" after-commit = stop , after-lock=kill ": "after-lock=kill,after-commit=stop",
		"after-settle=kill,after-claim=stop":      "after-claim=stop,after-settle=kill",
		"after-decrement=kill@2":                  "after-decrement=kill@2",
		"after-decrement=stop@1":                  "after-decrement=stop",
	}
	for spec, want := range good {
		points, err := parse(spec)
		if err != nil {
			t.Fatalf("parse(%q): %v", spec, err)
		}
		if got := (&Set{points: points}).String(); got != want {
			t.Errorf("parse(%q) arms %q, want %q", spec, got, want)
		}
	}
	bad := map[string]string{
		"after-lock":                         "want name=action",
		"after-lock=":                        "want name=action",
		"=kill":                              "want name=action",
		"after-lock=kill,":                   "want name=action",
		"after-lock=kill,,after-commit=stop": "want name=action",
		"after-lunch=kill":                   `unknown failpoint "after-lunch"`,
		"after-lock=explode":                 `unknown action "explode"`,
		"after-lock=KILL":                    `unknown action "KILL"`,
		"after-lock=kill,after-lock=stop":    "twice",
		"after-lock=kill@0":                  "hit number",
		"after-lock=kill@x":                  "hit number",
		"after-lock=kill@1001":               "hit number",
	}
	for spec, mention := range bad {
		_, err := parse(spec)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), mention) || !strings.Contains(err.Error(), EnvVar) {
			t.Errorf("parse(%q): got %v, want ErrInvalid naming %s and %q", spec, err, EnvVar, mention)
		}
	}
}

func TestNames(t *testing.T) {
	seen := map[Name]bool{}
	for _, n := range Names() {
		if seen[n] || !known(n) || n == "" {
			t.Fatalf("bad or repeated name %q", n)
		}
		seen[n] = true
	}
	if len(seen) != 10 {
		t.Fatalf("%d failpoints", len(seen))
	}
	// The caller owns the slice: changing it changes nothing here.
	ns := Names()
	ns[0] = "changed"
	if Names()[0] != AfterClaim {
		t.Fatal("Names shares its slice")
	}
}

// A nil Set and an empty one arm nothing, and Hit on them returns.
func TestEmptySets(t *testing.T) {
	var none *Set
	for _, s := range []*Set{none, {}} {
		s.Hit(AfterLock)
		if s.Armed() || s.Ignored() || s.String() != "" {
			t.Fatalf("%#v: armed %v ignored %v %q", s, s.Armed(), s.Ignored(), s.String())
		}
	}
}

// FromEnv arms in the failpoints build and ignores the variable in the
// others, reporting that it did.
func TestFromEnv(t *testing.T) {
	t.Setenv(EnvVar, "")
	s, err := FromEnv()
	if err != nil || s.Armed() || s.Ignored() {
		t.Fatalf("blank: %v armed %v ignored %v", err, s.Armed(), s.Ignored())
	}

	t.Setenv(EnvVar, "after-commit=kill,after-lock=stop")
	s, err = FromEnv()
	switch {
	case err != nil:
		t.Fatal(err)
	case Enabled && (!s.Armed() || s.Ignored() || s.String() != "after-lock=stop,after-commit=kill"):
		t.Fatalf("failpoints build: armed %v ignored %v %q", s.Armed(), s.Ignored(), s.String())
	case !Enabled && (s.Armed() || !s.Ignored() || s.String() != ""):
		t.Fatalf("production build: armed %v ignored %v %q", s.Armed(), s.Ignored(), s.String())
	}

	t.Setenv(EnvVar, "after-lunch=kill")
	s, err = FromEnv()
	if Enabled {
		if !errors.Is(err, ErrInvalid) || s != nil {
			t.Fatalf("failpoints build, unknown name: %v %v", s, err)
		}
	} else if err != nil || s.Armed() || !s.Ignored() {
		t.Fatalf("production build, unknown name: %v armed %v ignored %v", err, s.Armed(), s.Ignored())
	}
}
