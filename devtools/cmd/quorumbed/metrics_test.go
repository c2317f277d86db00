package main

import (
	"strings"
	"testing"
)

func TestParseMetricsRejectsGarbage(t *testing.T) {
	if _, err := parseMetrics(strings.NewReader("orders_place_total{outcome=\"created\" 1\n")); err == nil {
		t.Fatal("a broken exposition parsed")
	}
}
