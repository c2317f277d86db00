package quorum_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/integration/testbed"
	"github.com/quorumlock/quorumlock/quorum"
)

// Each Lua script on its own, against one real Redis master.
func TestScripts(t *testing.T) {
	bed := testbed.Start(t, testbed.Options{Redis: 1})
	node := bed.Redis[0]
	rdb := bed.RedisClients(t)[0]
	acquire := redis.NewScript(quorum.AcquireSource)
	release := redis.NewScript(quorum.ReleaseSource)
	extend := redis.NewScript(quorum.ExtendSource)
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
		if v := run(t, acquire, []string{k}, "tok-a", px.Milliseconds()); v != 0 {
			t.Fatalf("held by the same token: got %d, want 0 (each attempt draws a new token)", v)
		}
		if got := get(t, k); got != "tok-a" {
			t.Fatalf("a refused acquire changed the value to %q", got)
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

	t.Run("AcquireGuardStampsMissingMarker", func(t *testing.T) {
		if err := rdb.Del(ctx, quorum.BootMarkerKey).Err(); err != nil {
			t.Fatal(err)
		}
		k := "s:acq:guard"
		before, err := node.Time(ctx)
		if err != nil {
			t.Fatal(err)
		}
		v := run(t, acquire, []string{k, quorum.BootMarkerKey}, "tok", 5000, 60000)
		if v != -60000 {
			t.Fatalf("missing marker: got %d, want -60000 (warming, whole window left)", v)
		}
		after, err := node.Time(ctx)
		if err != nil {
			t.Fatal(err)
		}
		stamp, err := strconv.ParseInt(get(t, quorum.BootMarkerKey), 10, 64)
		if err != nil {
			t.Fatalf("marker is not a number: %v", err)
		}
		if stamp < before.UnixMilli() || stamp > after.UnixMilli() {
			t.Fatalf("marker %d is not the node's TIME (between %d and %d)", stamp, before.UnixMilli(), after.UnixMilli())
		}
		if d, _ := rdb.PTTL(ctx, quorum.BootMarkerKey).Result(); d != -1 {
			t.Fatalf("marker PTTL %v, want none", d)
		}
		if got := get(t, k); got != "<absent>" {
			t.Fatalf("a warming node wrote the lock key: %q", got)
		}
		v = run(t, acquire, []string{k, quorum.BootMarkerKey}, "tok", 5000, 60000)
		if v >= 0 || v < -60000 {
			t.Fatalf("young marker: got %d, want warming with at most 60000ms left", v)
		}
		if got := get(t, quorum.BootMarkerKey); got != strconv.FormatInt(stamp, 10) {
			t.Fatalf("a young marker was restamped: %q, was %d", got, stamp)
		}
	})

	t.Run("AcquireGuardVotesAfterWindow", func(t *testing.T) {
		if err := rdb.Del(ctx, quorum.BootMarkerKey).Err(); err != nil {
			t.Fatal(err)
		}
		k := "s:acq:window"
		if v := run(t, acquire, []string{k, quorum.BootMarkerKey}, "tok", 5000, 300); v != -300 {
			t.Fatalf("got %d, want -300", v)
		}
		now, err := node.Time(ctx)
		if err != nil {
			t.Fatal(err)
		}
		stamp, _ := strconv.ParseInt(get(t, quorum.BootMarkerKey), 10, 64)
		// Wait until the node's own clock says the window has passed.
		for i := 0; now.UnixMilli() < stamp+300; i++ {
			if i > 100 {
				t.Fatal("node clock did not advance past the window")
			}
			time.Sleep(20 * time.Millisecond)
			if now, err = node.Time(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if v := run(t, acquire, []string{k, quorum.BootMarkerKey}, "tok", 5000, 300); v != 1 {
			t.Fatalf("after the window: got %d, want 1", v)
		}
		if got := get(t, k); got != "tok" {
			t.Fatalf("value %q", got)
		}
	})

	t.Run("AcquireGuardAcceptsOldMarker", func(t *testing.T) {
		if err := rdb.Set(ctx, quorum.BootMarkerKey, "0", 0).Err(); err != nil {
			t.Fatal(err)
		}
		if v := run(t, acquire, []string{"s:acq:old", quorum.BootMarkerKey}, "tok", 5000, 60000); v != 1 {
			t.Fatalf("got %d, want 1", v)
		}
	})

	t.Run("AcquireGuardRestampsFutureOrGarbageMarker", func(t *testing.T) {
		now, err := node.Time(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, marker := range []string{strconv.FormatInt(now.Add(time.Hour).UnixMilli(), 10), "garbage"} {
			if err := rdb.Set(ctx, quorum.BootMarkerKey, marker, 0).Err(); err != nil {
				t.Fatal(err)
			}
			if v := run(t, acquire, []string{"s:acq:future", quorum.BootMarkerKey}, "tok", 5000, 60000); v != -60000 {
				t.Fatalf("marker %q: got %d, want -60000", marker, v)
			}
			stamp, err := strconv.ParseInt(get(t, quorum.BootMarkerKey), 10, 64)
			if err != nil || stamp > now.Add(time.Minute).UnixMilli() || stamp < now.UnixMilli() {
				t.Fatalf("marker %q was restamped to %d (%v), want the node's TIME near %d", marker, stamp, err, now.UnixMilli())
			}
		}
		if err := rdb.Set(ctx, quorum.BootMarkerKey, "0", 0).Err(); err != nil {
			t.Fatal(err)
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
}
