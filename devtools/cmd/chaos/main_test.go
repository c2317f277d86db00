package main

import (
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/devtools/chaos"
)

func TestParse(t *testing.T) {
	o, err := parse([]string{"-only", "client-pause, clock-jump", "-seed", "7", "-repeat", "3"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, sc := range o.selected() {
		ids = append(ids, sc.ID())
	}
	want := []string{"client-pause@quorum", "client-pause@etcdlock", "clock-jump@quorum", "clock-jump@etcdlock"}
	if !slices.Equal(ids, want) || o.seed != 7 || o.repeat != 3 || o.bedOptions().Etcd != 3 {
		t.Fatalf("selected %v, seed %d, repeat %d, bed %+v; want %v, 7, 3 and etcd", ids, o.seed, o.repeat, o.bedOptions(), want)
	}
	if h := header(o, "local", 3, time.Minute); !strings.Contains(h, "every row run 3 times, on seeds 7 to 9") ||
		!strings.Contains(h, "`go run ./devtools/cmd/chaos -only client-pause, clock-jump -seed 7 -repeat 3`") {
		t.Errorf("header: %s", h)
	}
	mo, err := parse(strings.Fields(makeChaosArgs), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if h := header(mo, "docker", 3, time.Minute); !strings.Contains(h, "Written by `make chaos` (`go run ./devtools/cmd/chaos "+makeChaosArgs+"`)") {
		t.Errorf("make chaos header: %s", h)
	}
	o, err = parse([]string{"-only", "carts", "-lock", "etcdlock"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if got := o.selected(); len(got) != 1 || !got[0].Carts || got[0].Lock != chaos.LockEtcd {
		t.Fatalf("-only carts -lock etcdlock selected %v", got)
	}
	o, err = parse([]string{"-lock", "quorum"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	for _, sc := range o.selected() {
		if sc.Lock != chaos.LockQuorum || o.bedOptions().Etcd != 0 {
			t.Fatalf("-lock quorum selected %s with bed %+v", sc.ID(), o.bedOptions())
		}
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
		{"-only", "nope"}, {"-workers", "1"}, {"-repeat", "0"}, {"-repeat", "101"}, {"-timeout", "0s"}, {"extra"}, {"-seed", "x"}, {"-lock", "zookeeper"},
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
