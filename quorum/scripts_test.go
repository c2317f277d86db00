package quorum_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/devtools/testbed"
	"github.com/quorumlock/quorumlock/devtools/testbed/bedtest"
	"github.com/quorumlock/quorumlock/quorum"
)

// Each Lua script on its own, against one real Redis master.
func TestScripts(t *testing.T) {
	bed := bedtest.Start(t, testbed.Options{Redis: 1})
	rdb := bedtest.RedisClients(t, bed)[0]
	acquire := redis.NewScript(quorum.AcquireSource)
	release := redis.NewScript(quorum.ReleaseSource)
	extend := redis.NewScript(quorum.ExtendSource)
	handover := redis.NewScript(quorum.HandoverSource)
	ctx, cancel := context.WithTimeout(context.Background(), slow(time.Minute))
	defer cancel()

	run := func(t *testing.T, s *redis.Script, keys []string, args ...any) int64 {
		t.Helper()
		v, err := s.Run(ctx, rdb, keys, args...).Int64()
		if err != nil {
			t.Fatalf("script: %v", err)
		}
		return v
	}
	get := func(t *testing.T, key string) string {
		t.Helper()
		v, err := rdb.Get(ctx, key).Result()
		if err == redis.Nil {
			return "<absent>"
		}
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	pttl := func(t *testing.T, key string) time.Duration {
		t.Helper()
		d, err := rdb.PTTL(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}

	t.Run("AcquireSetsWithNXAndPX", func(t *testing.T) {
		// The key must outlive the whole subtest, whatever the load.
		const px = 5 * time.Minute
		k := "s:acq:plain"
		before := time.Now()
		if v := run(t, acquire, []string{k}, "tok-a", px.Milliseconds()); v != 1 {
			t.Fatalf("free key: got %d, want 1", v)
		}
		if got := get(t, k); got != "tok-a" {
			t.Fatalf("value %q, want the plain token", got)
		}
		// Set after before, so at least px minus the time since then
		// remains (PTTL truncates to milliseconds).
		if d := pttl(t, k); d < px-time.Since(before)-time.Millisecond || d > px {
			t.Fatalf("PTTL %v, want about %v", d, px)
		}
		if v := run(t, acquire, []string{k}, "tok-b", px.Milliseconds()); v != 0 {
			t.Fatalf("held key: got %d, want 0", v)
		}
		if got := get(t, k); got != "tok-a" {
			t.Fatalf("a refused acquire changed the value to %q", got)
		}
	})

	t.Run("AcquireFailsWhenTheNodeRefusesTheWrite", func(t *testing.T) {
		// A node out of memory (maxmemory with noeviction) refuses the SET:
		// that is a failed node, never a vote. (Vouched for first, so that
		// the guarded script gets as far as the SET.)
		if err := quorum.TrustNode(ctx, rdb); err != nil {
			t.Fatal(err)
		}
		if err := rdb.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := rdb.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
				t.Error(err)
			}
		}()
		k := "s:acq:oom"
		for _, keys := range [][]string{{k}, {k, quorum.BootMarkerKey}} {
			args := []any{"tok", 5000}
			if len(keys) == 2 {
				args = append(args, time.Hour.Milliseconds(), "0")
			}
			v, err := acquire.Run(ctx, rdb, keys, args...).Int64()
			if err == nil {
				t.Fatalf("keys %q: a refused write answered %d, want an error", keys, v)
			}
		}
		if n, err := rdb.Exists(ctx, k).Result(); err != nil || n != 0 {
			t.Fatalf("EXISTS %s = %d, %v", k, n, err)
		}
	})

	t.Run("AcquireTreatsForeignValuesAsHeld", func(t *testing.T) {
		k := "s:acq:foreign"
		if err := rdb.Set(ctx, k, "another-client-value", 10*time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		if v := run(t, acquire, []string{k}, "tok", 5000); v != 0 {
			t.Fatalf("got %d, want 0", v)
		}
		h := "s:acq:hash"
		if err := rdb.HSet(ctx, h, "f", "v").Err(); err != nil {
			t.Fatal(err)
		}
		if v := run(t, acquire, []string{h}, "tok", 5000); v != 0 {
			t.Fatalf("key of another type: got %d, want 0", v)
		}
	})

	// The node's uptime in whole seconds and its run_id, from INFO.
	info := func(t *testing.T, c *redis.Client) (int64, string) {
		t.Helper()
		s, err := c.Info(ctx, "server").Result()
		if err != nil {
			t.Fatal(err)
		}
		var up int64 = -1
		var id string
		for _, line := range strings.Split(s, "\n") {
			line = strings.TrimSpace(line)
			if v, ok := strings.CutPrefix(line, "uptime_in_seconds:"); ok {
				up, _ = strconv.ParseInt(v, 10, 64)
			}
			if v, ok := strings.CutPrefix(line, "run_id:"); ok {
				id = v
			}
		}
		if up < 0 || id == "" {
			t.Fatalf("INFO server without uptime or run_id:\n%s", s)
		}
		return up, id
	}
	guarded := func(t *testing.T, c *redis.Client, k, tok string, window time.Duration, durable bool) int64 {
		t.Helper()
		d := "0"
		if durable {
			d = "1"
		}
		v, err := acquire.Run(ctx, c, []string{k, quorum.BootMarkerKey}, tok, 5000, window.Milliseconds(), d).Int64()
		if err != nil {
			t.Fatalf("script: %v", err)
		}
		return v
	}
	setMarker := func(t *testing.T, c *redis.Client, v string) {
		t.Helper()
		var err error
		if v == "" {
			err = c.Del(ctx, quorum.BootMarkerKey).Err()
		} else {
			err = c.Set(ctx, quorum.BootMarkerKey, v, 0).Err()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	const longWindow = 10 * time.Minute // far above the bed's uptime

	t.Run("AcquireIsSafeUnderAClientRetry", func(t *testing.T) {
		// A client that retries the script after a lost answer finds its
		// own token: that is a vote for us, and the TTL is not refreshed.
		const px = 5 * time.Minute
		k := "s:acq:retry"
		if v := run(t, acquire, []string{k}, "tok-r", px.Milliseconds()); v != 1 {
			t.Fatalf("free key: got %d, want 1", v)
		}
		if err := rdb.PExpire(ctx, k, 4*time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		if v := run(t, acquire, []string{k}, "tok-r", px.Milliseconds()); v != 1 {
			t.Fatalf("retried on its own key: got %d, want 1", v)
		}
		if d := pttl(t, k); d > 4*time.Minute {
			t.Fatalf("the retry refreshed the TTL to %v", d)
		}
		if v := run(t, acquire, []string{k}, "tok-other", px.Milliseconds()); v != 0 {
			t.Fatalf("another token: got %d, want 0", v)
		}
	})

	t.Run("GuardKeepsAYoungNodeOutOfTheVote", func(t *testing.T) {
		setMarker(t, rdb, "")
		k := "s:acq:young"
		before, _ := info(t, rdb)
		v := guarded(t, rdb, k, "tok", longWindow, false)
		after, _ := info(t, rdb)
		// -v is the window minus (uptime-1)s, for the uptime the script saw.
		lo := longWindow.Milliseconds() - (after-1)*1000
		hi := longWindow.Milliseconds() - (before-1)*1000
		if -v < lo || -v > hi {
			t.Fatalf("got %d, want -r with r in [%d, %d]", v, lo, hi)
		}
		if got := get(t, k); got != "<absent>" {
			t.Fatalf("a warming node wrote the lock key: %q", got)
		}
		if got := get(t, quorum.BootMarkerKey); got != "<absent>" {
			t.Fatalf("a warming node wrote the marker: %q", got)
		}
		// A marker from another process (an old snapshot's, a stale
		// vouch) does not let it vote.
		setMarker(t, rdb, "0123456789abcdef0123456789abcdef01234567")
		if v := guarded(t, rdb, k, "tok", longWindow, false); v >= 0 {
			t.Fatalf("a foreign marker: got %d, want < 0", v)
		}
	})

	t.Run("GuardTrustsTheVouchedProcess", func(t *testing.T) {
		if err := quorum.TrustNode(ctx, rdb); err != nil {
			t.Fatal(err)
		}
		_, id := info(t, rdb)
		if got := get(t, quorum.BootMarkerKey); got != id {
			t.Fatalf("marker %q, want the run_id %q", got, id)
		}
		if v := guarded(t, rdb, "s:acq:vouched", "tok", longWindow, false); v != 1 {
			t.Fatalf("vouched node: got %d, want 1", v)
		}
	})

	t.Run("DurableNodesTrustAMarkerThatSurvived", func(t *testing.T) {
		// The bed's node runs appendonly yes: a marker from an earlier
		// process shows the data survived the restart.
		setMarker(t, rdb, "0123456789abcdef0123456789abcdef01234567")
		if v := guarded(t, rdb, "s:acq:durable", "tok", longWindow, true); v != 1 {
			t.Fatalf("durable, marker kept: got %d, want 1", v)
		}
		setMarker(t, rdb, "")
		if v := guarded(t, rdb, "s:acq:durable:2", "tok", longWindow, true); v >= 0 {
			t.Fatalf("durable, marker lost: got %d, want < 0", v)
		}
		if got := get(t, quorum.BootMarkerKey); got != "<absent>" {
			t.Fatalf("a warming durable node stamped the marker: %q", got)
		}
	})

	t.Run("GuardLetsANodeUpForTheWindowVote", func(t *testing.T) {
		// First contact with a node that has been up longer than the
		// window: no marker, and it votes at once.
		setMarker(t, rdb, "")
		deadline := time.Now().Add(slow(time.Minute))
		for up, _ := info(t, rdb); up < 3; up, _ = info(t, rdb) {
			if time.Now().After(deadline) {
				t.Fatalf("uptime still %ds", up)
			}
			time.Sleep(100 * time.Millisecond)
		}
		if v := guarded(t, rdb, "s:acq:old", "tok", time.Second, false); v != 1 {
			t.Fatalf("node up for the window: got %d, want 1", v)
		}
		if got := get(t, quorum.BootMarkerKey); got != "<absent>" {
			t.Fatalf("the non-durable guard wrote a marker: %q", got)
		}
		// Durable nodes past the window get a marker: their own run_id.
		if v := guarded(t, rdb, "s:acq:old:durable", "tok", time.Second, true); v != 1 {
			t.Fatalf("durable node up for the window: got %d, want 1", v)
		}
		if _, id := info(t, rdb); get(t, quorum.BootMarkerKey) != id {
			t.Fatalf("marker %q, want the run_id %q", get(t, quorum.BootMarkerKey), id)
		}
	})

	t.Run("GuardSkipsINFOLongAfterTheLastSave", func(t *testing.T) {
		// LASTSAVE is no older than the process, so a node whose last save
		// is older than the window is up for the window: the script votes
		// without INFO. After a save it asks INFO for the uptime again,
		// and still votes, being up long enough.
		infoCalls := func(t *testing.T) int64 {
			t.Helper()
			s, err := rdb.Info(ctx, "commandstats").Result()
			if err != nil {
				t.Fatal(err)
			}
			for _, line := range strings.Split(s, "\n") {
				if v, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_info:calls="); ok {
					n, _ := strconv.ParseInt(v[:strings.IndexByte(v, ',')], 10, 64)
					return n
				}
			}
			return 0
		}
		setMarker(t, rdb, "")
		deadline := time.Now().Add(slow(time.Minute))
		for {
			last, err := rdb.LastSave(ctx).Result()
			if err != nil {
				t.Fatal(err)
			}
			if time.Now().Unix()-last >= 3 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("LASTSAVE still %ds ago", time.Now().Unix()-last)
			}
			time.Sleep(100 * time.Millisecond)
		}
		before := infoCalls(t)
		for i := range 5 {
			if v := guarded(t, rdb, "s:acq:fast:"+strconv.Itoa(i), "tok", time.Second, false); v != 1 {
				t.Fatalf("fast path: got %d, want 1", v)
			}
		}
		// infoCalls itself is one INFO: anything more came from the script.
		if n := infoCalls(t) - before; n != 1 {
			t.Fatalf("the script called INFO %d times past the window, want 0", n-1)
		}
		if err := rdb.Save(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		before = infoCalls(t)
		if v := guarded(t, rdb, "s:acq:aftersave", "tok", time.Second, false); v != 1 {
			t.Fatalf("after a save, a node up for the window: got %d, want 1", v)
		}
		if n := infoCalls(t) - before; n != 2 {
			t.Fatalf("after a save the script called INFO %d times, want 1", n-1)
		}
	})

	t.Run("DurableNeedsTheAOF", func(t *testing.T) {
		// A node declared durable that runs without an AOF (an RDB
		// snapshot keeps old markers and loses recent keys) is not
		// trusted on its marker.
		nb := bedtest.Start(t, testbed.Options{Redis: 1, AppendFsync: testbed.FsyncOff})
		c := bedtest.RedisClients(t, nb)[0]
		setMarker(t, c, "0123456789abcdef0123456789abcdef01234567")
		if v := guarded(t, c, "s:acq:noaof", "tok", longWindow, true); v >= 0 {
			t.Fatalf("durable without AOF, old marker: got %d, want < 0", v)
		}
	})

	t.Run("ReleaseComparesAndDeletes", func(t *testing.T) {
		k := "s:rel"
		// The seed's case: token-old expired, token-new holds the key.
		if err := rdb.Set(ctx, k, "token-new", 10*time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		if v := run(t, release, []string{k}, "token-old"); v != 0 {
			t.Fatalf("foreign token: got %d, want 0", v)
		}
		if got := get(t, k); got != "token-new" {
			t.Fatalf("value is %q, want token-new", got)
		}
		if v := run(t, release, []string{k}, "token-new"); v != 1 {
			t.Fatalf("own token: got %d, want 1", v)
		}
		if got := get(t, k); got != "<absent>" {
			t.Fatalf("value is %q after release", got)
		}
		if v := run(t, release, []string{k}, "token-new"); v != 0 {
			t.Fatalf("repeat release: got %d, want 0", v)
		}
	})

	t.Run("ExtendComparesAndPexpires", func(t *testing.T) {
		// The key outlives the subtest whatever the load; the extension
		// is to a TTL far above the first one, and the checks tell them
		// apart by a wide margin.
		const ttl, ext = time.Minute, 10 * time.Minute
		k := "s:ext"
		if err := rdb.Set(ctx, k, "tok", ttl).Err(); err != nil {
			t.Fatal(err)
		}
		if v := run(t, extend, []string{k}, "other", ext.Milliseconds()); v != 0 {
			t.Fatalf("foreign token: got %d, want 0", v)
		}
		if d := pttl(t, k); d > ttl {
			t.Fatalf("a foreign extend changed the TTL to %v", d)
		}
		before := time.Now()
		if v := run(t, extend, []string{k}, "tok", ext.Milliseconds()); v != 1 {
			t.Fatalf("own token: got %d, want 1", v)
		}
		if d := pttl(t, k); d < ext-time.Since(before)-time.Millisecond || d > ext {
			t.Fatalf("PTTL %v after extend, want about %v", d, ext)
		}
		if v := run(t, extend, []string{"s:ext:absent"}, "tok", ext.Milliseconds()); v != 0 {
			t.Fatalf("absent key: got %d, want 0", v)
		}
		if got := get(t, "s:ext:absent"); got != "<absent>" {
			t.Fatalf("extend created the key: %q", got)
		}
	})

	t.Run("MultiKeyAcquireIsAllOrNothing", func(t *testing.T) {
		const px = 5 * time.Minute
		a, b, c := "s:multi:a", "s:multi:b", "s:multi:c"
		if err := rdb.Set(ctx, b, "other", px).Err(); err != nil {
			t.Fatal(err)
		}
		// Unguarded: ARGV[3] and [4] are placeholders, ARGV[5] the count.
		if v := run(t, acquire, []string{a, b, c}, "tok", px.Milliseconds(), 0, 0, 3); v != 0 {
			t.Fatalf("one key held by another: got %d, want 0", v)
		}
		if got := get(t, a) + get(t, c); got != "<absent><absent>" {
			t.Fatalf("a refused multi-key acquire wrote %q", got)
		}
		rdb.Del(ctx, b)
		if v := run(t, acquire, []string{a, b, c, quorum.BootMarkerKey}, "tok", px.Milliseconds(), px.Milliseconds(), "0", 3); v >= 0 && v != 1 {
			t.Fatalf("guarded multi-key acquire: got %d", v)
		}
		if v := run(t, acquire, []string{a, b, c}, "tok", px.Milliseconds(), 0, 0, 3); v != 1 {
			t.Fatalf("free keys: got %d, want 1", v)
		}
		for _, k := range []string{a, b, c} {
			if got := get(t, k); got != "tok" {
				t.Fatalf("%s = %q, want the token", k, got)
			}
		}
		// A retry of the same attempt (its answer lost) is a yes again.
		if v := run(t, acquire, []string{a, b, c}, "tok", px.Milliseconds(), 0, 0, 3); v != 1 {
			t.Fatalf("retried acquire: got %d, want 1", v)
		}
	})

	t.Run("MultiKeyExtendAndReleaseNeedEveryKey", func(t *testing.T) {
		const px = 5 * time.Minute
		a, b := "s:multi2:a", "s:multi2:b"
		if v := run(t, acquire, []string{a, b}, "tok", px.Milliseconds(), 0, 0, 2); v != 1 {
			t.Fatalf("acquire: got %d", v)
		}
		if v := run(t, extend, []string{a, b}, "tok", (2 * px).Milliseconds()); v != 1 {
			t.Fatalf("extend both: got %d, want 1", v)
		}
		rdb.Del(ctx, b)
		before := pttl(t, a)
		if v := run(t, extend, []string{a, b}, "tok", (3 * px).Milliseconds()); v != 0 {
			t.Fatalf("extend with one key gone: got %d, want 0", v)
		}
		if d := pttl(t, a); d > before {
			t.Fatalf("a failed multi-key extend moved a's TTL from %v to %v", before, d)
		}
		if v := run(t, release, []string{a, b}, "tok"); v != 0 {
			t.Fatalf("release with one key gone: got %d, want 0", v)
		}
		if got := get(t, a); got != "<absent>" {
			t.Fatalf("release left our own key a = %q", got)
		}
	})

	t.Run("HandoverPassesEveryKeyOrReleases", func(t *testing.T) {
		const px = 5 * time.Minute
		a, b := "s:ho:a", "s:ho:b"
		sub := rdb.Subscribe(ctx, quorum.ReleaseChannelPrefix+a, quorum.ReleaseChannelPrefix+b)
		defer func() { _ = sub.Close() }()
		if _, err := sub.Receive(ctx); err != nil { // the first subscription's confirmation
			t.Fatal(err)
		}
		if v := run(t, acquire, []string{a, b}, "old", (px / 2).Milliseconds(), 0, 0, 2); v != 1 {
			t.Fatalf("acquire: got %d", v)
		}
		before := time.Now()
		if v := run(t, handover, []string{a, b}, "old", "new", px.Milliseconds()); v != 1 {
			t.Fatalf("hand-over of held keys: got %d, want 1", v)
		}
		for _, k := range []string{a, b} {
			if got := get(t, k); got != "new" {
				t.Fatalf("%s = %q after the hand-over, want new", k, got)
			}
			if d := pttl(t, k); d < px-time.Since(before)-time.Millisecond || d > px {
				t.Fatalf("%s: PTTL %v, want the new lease's %v", k, d, px)
			}
		}
		// Not ours (the old token again): nothing moves, nothing is announced.
		if v := run(t, handover, []string{a, b}, "old", "other", px.Milliseconds()); v != 0 {
			t.Fatalf("hand-over of another owner's keys: got %d, want 0", v)
		}
		if got := get(t, a); got != "new" {
			t.Fatalf("a failed hand-over changed a to %q", got)
		}
		// One key gone: no hand-over; the key still ours is released and announced.
		rdb.Del(ctx, b)
		if v := run(t, handover, []string{a, b}, "new", "next", px.Milliseconds()); v != 0 {
			t.Fatalf("hand-over with a key gone: got %d, want 0", v)
		}
		if ga, gb := get(t, a), get(t, b); ga != "<absent>" || gb != "<absent>" {
			t.Fatalf("after a refused hand-over a = %q, b = %q, want both absent", ga, gb)
		}
		m, err := sub.ReceiveMessage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if m.Channel != quorum.ReleaseChannelPrefix+a {
			t.Fatalf("announced on %q, want a's release", m.Channel)
		}
	})
}
