package quorum

import (
	"context"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// TrustNode tells the restart guard that node c, as it runs now, has not
// forgotten any lock key it acknowledged (it is new, or an operator checked
// its data), so it may vote before its uptime reaches the restart window.
// The trust is tied to the node's run_id, so it ends at its next restart.
// Use it on new nodes, never to skip the wait after an unplanned restart.
func TrustNode(ctx context.Context, c redis.Cmdable) error {
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return fmt.Errorf("quorum: trust node: %w", err)
	}
	id := infoField(info, "run_id")
	if id == "" {
		return fmt.Errorf("quorum: trust node: INFO server has no run_id")
	}
	if err := c.Set(ctx, BootMarkerKey, id, 0).Err(); err != nil {
		return fmt.Errorf("quorum: trust node: %w", err)
	}
	return nil
}

// infoField returns the value of field in an INFO reply, or "".
func infoField(info, field string) string {
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}
