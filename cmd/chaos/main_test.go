package main

import (
	"io"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	o, err := parse([]string{"-only", "client-pause, clock-jump", "-seed", "7"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if got := o.selected(); len(got) != 2 || got[0].Name != "client-pause" || got[1].Name != "clock-jump" || o.seed != 7 {
		t.Fatalf("selected %v, seed %d", got, o.seed)
	}
	o, err = parse([]string{"-only", "carts"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if got := o.selected(); len(got) != 1 || !got[0].Carts {
		t.Fatalf("-only carts selected %v", got)
	}
	o, err = parse([]string{"-short"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	for _, sc := range o.selected() {
		if !sc.Short {
			t.Fatalf("-short selected %s", sc.Name)
		}
	}
	for _, bad := range [][]string{
		{"-only", "nope"}, {"-workers", "1"}, {"-timeout", "0s"}, {"extra"}, {"-seed", "x"},
	} {
		if _, err := parse(bad, io.Discard); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestSplice(t *testing.T) {
	fresh := splice("", "TABLE\n")
	if !strings.HasPrefix(fresh, beginMarker) || !strings.Contains(fresh, "TABLE\n"+endMarker) {
		t.Fatalf("new file: %q", fresh)
	}
	doc := "# Safety\n\nhand-written claims\n"
	once := splice(doc, "ONE\n")
	if !strings.HasPrefix(once, doc+"\n"+beginMarker) {
		t.Fatalf("appended block: %q", once)
	}
	twice := splice(once+"\n## after\n", "TWO\n")
	if strings.Contains(twice, "ONE") || !strings.Contains(twice, "TWO\n"+endMarker+"\n## after\n") || !strings.HasPrefix(twice, doc) {
		t.Fatalf("replaced block: %q", twice)
	}
}
