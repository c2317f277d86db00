package fencing

import (
	"errors"
	"strings"
	"testing"
)

func TestBuildRendersOneStatementShape(t *testing.T) {
	tbl, err := NewTable("product_stock", "product_id")
	if err != nil {
		t.Fatal(err)
	}
	st, err := tbl.build(Update{
		Key:       "42",
		Fence:     7,
		Set:       []Assignment{Sub("available", int64(1))},
		Where:     []Condition{Ge("available", int64(1))},
		Returning: []string{"available"},
	}, 1)
	if err != nil {
		t.Fatal(err)
	}
	wantUpdate := `UPDATE "product_stock" SET "available" = "available" - $3, "last_fence" = $1 ` +
		`WHERE "product_id" = $2 AND "available" >= $4 AND "last_fence" < $1 RETURNING "last_fence", "available"`
	if st.update != wantUpdate {
		t.Errorf("update:\n got %s\nwant %s", st.update, wantUpdate)
	}
	wantArgs := []any{int64(7), "42", int64(1), int64(1)}
	if len(st.updateArgs) != len(wantArgs) {
		t.Fatalf("args %v, want %v", st.updateArgs, wantArgs)
	}
	for i := range wantArgs {
		if st.updateArgs[i] != wantArgs[i] {
			t.Errorf("arg %d = %v, want %v", i+1, st.updateArgs[i], wantArgs[i])
		}
	}
	wantReread := `SELECT "last_fence", COALESCE(("available" >= $2), false) FROM "product_stock" WHERE "product_id" = $1`
	if st.reread != wantReread {
		t.Errorf("reread:\n got %s\nwant %s", st.reread, wantReread)
	}
}

func TestBuildWithoutConditions(t *testing.T) {
	tbl, _ := NewTable("t", "id")
	st, err := tbl.build(Update{Key: 1, Fence: 1}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if want := `UPDATE "t" SET "last_fence" = $1 WHERE "id" = $2 AND "last_fence" < $1 RETURNING "last_fence"`; st.update != want {
		t.Errorf("got %s", st.update)
	}
	if want := `SELECT "last_fence", true FROM "t" WHERE "id" = $1`; st.reread != want {
		t.Errorf("got %s", st.reread)
	}
}

// unquote reverses quote for a single identifier, or reports that s is not
// exactly one quoted identifier.
func unquote(s string) (string, bool) {
	if len(s) < 2 || s[0] != '"' || s[len(s)-1] != '"' {
		return "", false
	}
	inner := s[1 : len(s)-1]
	var b strings.Builder
	for i := 0; i < len(inner); i++ {
		if inner[i] == '"' {
			if i+1 >= len(inner) || inner[i+1] != '"' {
				return "", false // a lone quote would end the identifier early
			}
			i++
		}
		b.WriteByte(inner[i])
	}
	return b.String(), true
}

// FuzzIdentifier checks that every name the package accepts is rendered as
// exactly one quoted identifier that stands for that very name, so no name
// can change the statement around it.
func FuzzIdentifier(f *testing.F) {
	for _, s := range []string{"available", `a"b`, `x" SET y = 1; --`, `""`, "Ünïcode", "a\x00b", "", "\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if err := validateIdent("column", name); err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		got, ok := unquote(quote(name))
		if !ok || got != name {
			t.Fatalf("quote(%q) = %s, unquotes to %q (ok=%v)", name, quote(name), got, ok)
		}
		tbl, err := NewTable("t", "id")
		if err != nil {
			t.Fatal(err)
		}
		_, err = tbl.build(Update{Key: "k", Fence: 1, Set: []Assignment{Set(name, 1)}, Where: []Condition{Eq(name, 2)}}, 0)
		if name == "id" || name == DefaultFenceColumn {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("reserved column %q accepted: %v", name, err)
			}
		} else if err != nil {
			t.Fatalf("valid column %q rejected: %v", name, err)
		}
	})
}

// FuzzKey checks that Next's key validation accepts exactly the keys that
// Postgres text can store and that fit the limit.
func FuzzKey(f *testing.F) {
	for _, s := range []string{"stock:42", "", "\x00", "\xff", strings.Repeat("k", MaxKeyLen+1)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		err := validateKey(key)
		want := key != "" && len(key) <= MaxKeyLen && !strings.ContainsRune(key, 0) && strings.ToValidUTF8(key, "") == key
		if (err == nil) != want {
			t.Fatalf("validateKey(%q) = %v, want ok=%v", key, err, want)
		}
	})
}
