package benchkit

import (
	"bytes"
	"image/color"
	"os"
	"path/filepath"
	"testing"
	"time"

	"gonum.org/v1/plot"
)

// TestCDFAndPNG: the CDF keeps the extremes within CDFPoints points, and
// panels a log axis could choke on (no line, one repeated sample) draw.
func TestCDFAndPNG(t *testing.T) {
	xys := CDF([]time.Duration{3 * time.Millisecond, time.Millisecond, 2 * time.Millisecond})
	if len(xys) != 3 || xys[0].X != 1 || xys[2].X != 3 || xys[2].Y != 1 {
		t.Fatalf("cdf: %v", xys)
	}
	var many []time.Duration
	for i := range 5000 {
		many = append(many, time.Duration(i+1)*time.Microsecond)
	}
	if xys := CDF(many); len(xys) != CDFPoints || xys[len(xys)-1].X != 5 || xys[len(xys)-1].Y != 1 {
		t.Fatalf("cdf of many: %d points, last %v", len(xys), xys[len(xys)-1])
	}
	empty := NewCDFPanel("empty", "ms", "fraction")
	same := NewCDFPanel("same", "ms", "fraction")
	if err := same.Add([]time.Duration{time.Millisecond, time.Millisecond}, "a", color.Black, true); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "p.png")
	if err := WritePNG(path, []*plot.Plot{empty.Plot(), same.Plot(), empty.Plot()}, 2); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil || !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatalf("not a PNG: %v", err)
	}
	if err := WritePNG(path, nil, 2); err == nil {
		t.Fatal("no panel drawn")
	}
}
