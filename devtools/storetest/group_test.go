package storetest_test

import (
	"testing"

	"github.com/quorumlock/quorumlock/devtools/storetest"
)

func TestWithDatabase(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"postgres://u:p@127.0.0.2:5001,127.0.0.2:5002/quorumlock?target_session_attrs=read-write&sslmode=disable",
			"postgres://u:p@127.0.0.2:5001,127.0.0.2:5002/t_1?target_session_attrs=read-write&sslmode=disable"},
		{"postgresql://u:p@h:1/db", "postgresql://u:p@h:1/t_1"},
		{"postgres://h:1?sslmode=disable", "postgres://h:1/t_1?sslmode=disable"},
		{"postgres://u:p%2Fq@h:1", "postgres://u:p%2Fq@h:1/t_1"},
	} {
		got, err := storetest.WithDatabase(c.in, "t_1")
		if err != nil || got != c.want {
			t.Errorf("WithDatabase(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
	if _, err := storetest.WithDatabase("host=h dbname=db", "t_1"); err == nil {
		t.Error("WithDatabase took a keyword/value DSN")
	}
}
