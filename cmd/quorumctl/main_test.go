package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"
)

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{nil, {"frobnicate"}, {"bed", "-redis", "x"}, {"demo", "-ordersd", "/nonexistent/ordersd"}} {
		if err := run(context.Background(), args, io.Discard); err == nil {
			t.Errorf("run(%q) accepted", args)
		}
	}
}

func TestFindOrdersd(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "ordersd")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	got, err := findOrdersd(bin)
	if err != nil || got != bin {
		t.Fatalf("findOrdersd(%q) = %q, %v", bin, got, err)
	}
}

func TestInfoField(t *testing.T) {
	info := "# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\n"
	if v := infoField(info, "redis_version"); v != "7.0.15" {
		t.Fatalf("got %q", v)
	}
	if v := infoField(info, "missing"); v != "?" {
		t.Fatalf("got %q", v)
	}
}
