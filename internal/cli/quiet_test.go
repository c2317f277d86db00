package cli_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/internal/cli"
)

// QuietLogger is what the commands hand to go-redis; its Printf has the
// signature go-redis's logger interface asks for, and prints nothing.
func TestQuietLoggerFitsGoRedis(t *testing.T) {
	var l interface {
		Printf(ctx context.Context, format string, v ...any)
	} = cli.QuietLogger{}
	l.Printf(context.Background(), "dial %s: refused", "127.0.0.1:1")
	redis.SetLogger(cli.QuietLogger{}) // compiles only if it fits
}
