package main

import (
	"context"
	"net"
	"slices"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"
)

// hostList names cc's hosts in the order pgx tries them, TLS variants
// included.
func hostList(cc *pgx.ConnConfig) []string {
	out := []string{hostPort(cc.Host, cc.Port)}
	for _, f := range cc.Fallbacks {
		out = append(out, hostPort(f.Host, f.Port))
	}
	return out
}

func hostPort(h string, p uint16) string { return net.JoinHostPort(h, strconv.Itoa(int(p))) }

// The host where the last connection found the primary is tried first,
// with each of its TLS variants; the others keep their order. Without a
// preference, or with one the URL does not name, nothing moves.
func TestHostPreference(t *testing.T) {
	url := "postgres://u@10.0.0.1:5432,10.0.0.2:5433,10.0.0.3:5434/db?sslmode=prefer&target_session_attrs=read-write"
	parse := func() *pgx.ConnConfig {
		cc, err := pgx.ParseConfig(url)
		if err != nil {
			t.Fatal(err)
		}
		return cc
	}
	var h hostPreference
	cc := parse()
	want := hostList(cc) // sslmode=prefer: each host twice, with and without TLS
	if err := h.beforeConnect(context.Background(), cc); err != nil || !slices.Equal(hostList(cc), want) {
		t.Fatalf("no preference: %v (%v), want %v", hostList(cc), err, want)
	}
	h.last = "10.0.0.2:5433"
	cc = parse()
	if err := h.beforeConnect(context.Background(), cc); err != nil {
		t.Fatal(err)
	}
	got := hostList(cc)
	wantPref := []string{"10.0.0.2:5433", "10.0.0.2:5433", "10.0.0.1:5432", "10.0.0.1:5432", "10.0.0.3:5434", "10.0.0.3:5434"}
	if !slices.Equal(got, wantPref) {
		t.Fatalf("preferring 10.0.0.2:5433: %v, want %v", got, wantPref)
	}
	if cc.TLSConfig == nil || cc.Fallbacks[0].TLSConfig != nil {
		t.Fatalf("the TLS variants moved out of order: first TLS %v, second %v", cc.TLSConfig != nil, cc.Fallbacks[0].TLSConfig != nil)
	}
	h.forget()
	cc = parse()
	if err := h.beforeConnect(context.Background(), cc); err != nil || !slices.Equal(hostList(cc), want) {
		t.Fatalf("forgotten: %v (%v), want %v", hostList(cc), err, want)
	}
	h.last = "10.9.9.9:1"
	cc = parse()
	if err := h.beforeConnect(context.Background(), cc); err != nil || !slices.Equal(hostList(cc), want) {
		t.Fatalf("an unknown preference: %v (%v), want %v", hostList(cc), err, want)
	}
}
