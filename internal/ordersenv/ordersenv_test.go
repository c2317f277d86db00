package ordersenv_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/quorumlock/quorumlock/internal/ordersenv"
)

func lookup(m map[string]string) ordersenv.Lookup {
	return func(name string) (string, bool) { v, ok := m[name]; return v, ok }
}

func TestSecret(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "pw")
	if err := os.WriteFile(file, []byte("from-file\r\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		env     map[string]string
		want    string
		wantErr string
	}{
		"unset":     {env: nil, want: ""},
		"variable":  {env: map[string]string{"S": "from-env"}, want: "from-env"},
		"file":      {env: map[string]string{"S_FILE": file}, want: "from-file"},
		"both":      {env: map[string]string{"S": "from-env", "S_FILE": file}, wantErr: "S and S_FILE are both set"},
		"no file":   {env: map[string]string{"S_FILE": filepath.Join(dir, "missing")}, wantErr: "S_FILE"},
		"empty var": {env: map[string]string{"S": ""}, want: ""},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := ordersenv.Secret(lookup(c.env), "S")
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) || !errors.Is(err, ordersenv.ErrInvalid) {
					t.Fatalf("got %q, %v; want an ErrInvalid naming %q", got, err, c.wantErr)
				}
				if strings.Contains(err.Error(), "from-env") || strings.Contains(err.Error(), "from-file") {
					t.Fatalf("the error shows the secret: %v", err)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("got %q, %v; want %q", got, err, c.want)
			}
		})
	}
}

func TestRedisAddrs(t *testing.T) {
	got, err := ordersenv.RedisAddrs(" 127.0.0.1:7001, redis2:6379 ,,[::1]:7003")
	if err != nil || strings.Join(got, " ") != "127.0.0.1:7001 redis2:6379 [::1]:7003" {
		t.Fatalf("got %q, %v", got, err)
	}
	for list, want := range map[string]string{
		"":                        "is empty",
		" , ":                     "is empty",
		"localhost":               "entry \"localhost\"",
		"h:0":                     "not a number in 1-65535",
		"h:65536":                 "not a number in 1-65535",
		"h:port":                  "not a number in 1-65535",
		"127.0.0.1:1,127.0.0.1:1": "names 127.0.0.1:1 twice",
	} {
		if _, err := ordersenv.RedisAddrs(list); err == nil || !strings.Contains(err.Error(), want) || !errors.Is(err, ordersenv.ErrInvalid) {
			t.Errorf("%q: got %v, want an ErrInvalid containing %q", list, err, want)
		}
	}
}

func TestRedisTLS(t *testing.T) {
	tc, err := ordersenv.RedisTLS("")
	if err != nil || tc.MinVersion == 0 || tc.RootCAs != nil {
		t.Fatalf("system roots: %+v, %v", tc, err)
	}
	bad := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(bad, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ordersenv.RedisTLS(bad); err == nil || !strings.Contains(err.Error(), ordersenv.VarRedisTLSCAFile) || !errors.Is(err, ordersenv.ErrInvalid) {
		t.Fatalf("bad CA: %v", err)
	}
	if _, err := ordersenv.RedisTLS(filepath.Join(t.TempDir(), "missing.pem")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing CA: %v, want it to wrap os.ErrNotExist", err)
	}
}

func TestBoolAndDuration(t *testing.T) {
	if b, err := ordersenv.Bool("B", "true"); err != nil || !b {
		t.Fatalf("Bool: %v %v", b, err)
	}
	if _, err := ordersenv.Bool("B", "maybe"); err == nil || !strings.Contains(err.Error(), `B="maybe": want true or false`) {
		t.Fatalf("Bool(maybe): %v", err)
	}
	if d, err := ordersenv.Duration("D", "1m"); err != nil || d.Minutes() != 1 {
		t.Fatalf("Duration: %v %v", d, err)
	}
	if _, err := ordersenv.Duration("D", "five"); err == nil || !strings.Contains(err.Error(), `D="five"`) || !errors.Is(err, ordersenv.ErrInvalid) {
		t.Fatalf("Duration(five): %v", err)
	}
}
