package main

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/quorum"
)

// A read lease and a write lease taken through quorum's API: rwlock shows
// the reader, then the writer holding every read permit; releases with a
// wrong token or a bad index change nothing, the holder's token frees.
func TestRWLockCommand(t *testing.T) {
	b := newPrimBed(t, quorum.WithMaxReaders(4))
	ctx := context.Background()
	const name = "doc"
	rw, err := b.locker.RWLock(name)
	if err != nil {
		t.Fatal(err)
	}
	rl, err := rw.TryRLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	i, rtok := permitIndex(t, name+readSuffix, rl), rl.Token()
	r := b.ctl(t, "", "rwlock", name)
	wantCode(t, r, 0)
	row := regexp.MustCompile(fmt.Sprintf(`(?m)^%d\s+%s\s+%s\s+3 of 3\s+\d`, i, regexp.QuoteMeta(rl.Key()), digest(rtok)))
	if !row.MatchString(r.stdout) || !strings.Contains(r.stdout, "readers: 1 of 4 read permits held") || !strings.Contains(r.stdout, "writer: none\n") {
		t.Fatalf("rwlock with a reader:\n%s", r.stdout)
	}

	wantCode(t, b.ctl(t, "", "rwlock", name, "--release-reader", fmt.Sprint(i), "--token", "not-the-token"), 1, "nothing released")
	wantCode(t, b.ctl(t, "", "rwlock", name, "--release-reader", "4", "--token", rtok), 2, `permit 4: "doc:read" has 4 permits (0 to 3)`)
	b.want(t, rtok, rl.Key())
	r = b.ctl(t, rtok+"\n", "rwlock", name, "--release-reader", fmt.Sprint(i), "--token", "-")
	wantCode(t, r, 0)
	if !strings.Contains(r.stdout, "released on 3 of 3 masters") {
		t.Fatalf("release of the reader:\n%s", r.stdout)
	}
	b.want(t, "<absent>", rl.Key())

	w, err := rw.TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wtok := w.Token()
	checkWriterShown(t, b, name, wtok)
	checkWriterRelease(t, b, name, wtok)
	b.noTokens(t, rtok, wtok)
}

// checkWriterShown checks rwlock while the writer holds wtok, and a
// waiting writer's key set by hand.
func checkWriterShown(t *testing.T, b *primBed, name, wtok string) {
	t.Helper()
	for _, a := range b.admins {
		a.Set(context.Background(), name+waitingSuffix, "waiting-token", time.Minute)
	}
	r := b.ctl(t, "", "rwlock", name)
	wantCode(t, r, 0)
	for _, want := range []string{"writer: token " + digest(wtok) + " on 3 of 3 masters (2 needed)", "it holds 4 of 4 read permits",
		"waiting writer: token " + digest("waiting-token") + " on 3 of 3 masters", "readers: 0 of 4 read permits held"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("rwlock with a writer lacks %q:\n%s", want, r.stdout)
		}
	}
	r = b.ctl(t, "", "rwlock", name, "-o", "json")
	wantCode(t, r, 0)
	var rep rwlockReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("%v: %s", err, r.stdout)
	}
	if rep.Name != name || !rep.Writer.Held || rep.Writer.Holder.TokenDigest != digest(wtok) || rep.Writer.Key != name ||
		!rep.WaitingWriter.Held || rep.WaitingWriter.Key != name+waitingSuffix || rep.WriterPermits != 4 || rep.ReadersHeld != 0 ||
		rep.MaxReaders != 4 || rep.Readers.Count != 4 || len(rep.Readers.Permits) != 4 || len(rep.Masters) != 3 {
		t.Fatalf("rwlock JSON %+v", rep)
	}
	for _, a := range b.admins {
		a.Del(context.Background(), name+waitingSuffix)
	}
}

// checkWriterRelease releases the writer, first with a wrong token.
func checkWriterRelease(t *testing.T, b *primBed, name, wtok string) {
	t.Helper()
	keys := []string{name}
	for i := range 4 {
		keys = append(keys, quorum.PermitKey(name+readSuffix, i))
	}
	r := b.ctl(t, "", "rwlock", name, "--release-writer", "--token", "not-the-token")
	wantCode(t, r, 1, "nothing released")
	b.want(t, wtok, keys...)

	r = b.ctl(t, wtok+"\n", "rwlock", name, "--release-writer", "--token", "-", "-o", "json")
	wantCode(t, r, 0)
	var rep writerReleaseReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || rep.Name != name || rep.TokenDigest != digest(wtok) || rep.Keys != 5 || rep.Released != 3 {
		t.Fatalf("release-writer JSON %q (%v)", r.stdout, err)
	}
	for _, n := range rep.Nodes {
		if n.Result != unlockReleased || n.PermitsReleased != 4 {
			t.Errorf("node %+v", n)
		}
	}
	b.want(t, "<absent>", keys...)
	r = b.ctl(t, "", "rwlock", name, "--release-writer", "--token", wtok)
	wantCode(t, r, 1, "nothing released")
	if strings.Count(r.stdout, "not owner: absent") != 3 {
		t.Errorf("a second release of the writer:\n%s", r.stdout)
	}
}
