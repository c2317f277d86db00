package cli

import "context"

// QuietLogger drops every line it is given. It fits go-redis's logger
// (redis.SetLogger(cli.QuietLogger{})), for commands that report an
// unreachable node themselves rather than let go-redis log every failed
// dial.
type QuietLogger struct{}

// Printf does nothing.
func (QuietLogger) Printf(context.Context, string, ...any) {}
