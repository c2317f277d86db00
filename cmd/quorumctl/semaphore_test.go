package main

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/quorumlock/quorumlock/lease"
	"github.com/quorumlock/quorumlock/quorum"
)

// permitIndex is the index of the permit that le holds.
func permitIndex(t *testing.T, name string, le lease.Lease) int {
	t.Helper()
	for i := range quorum.MaxPermits {
		if le.Key() == quorum.PermitKey(name, i) {
			return i
		}
	}
	t.Fatalf("lease key %q is no permit of %q", le.Key(), name)
	return -1
}

// A permit taken through quorum's API: semaphore shows its holder's
// digest; a release with a wrong token or a bad index changes nothing, one
// with the holder's token frees it.
func TestSemaphoreCommand(t *testing.T) {
	b := newPrimBed(t)
	ctx := context.Background()
	const name = "jobs"
	sem, err := b.locker.Semaphore(name, 3)
	if err != nil {
		t.Fatal(err)
	}
	le, err := sem.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	i, tok := permitIndex(t, name, le), le.Token()
	key := quorum.PermitKey(name, i)

	r := b.ctl(t, "", "semaphore", name)
	wantCode(t, r, 0)
	row := regexp.MustCompile(fmt.Sprintf(`(?m)^%d\s+%s\s+%s\s+3 of 3\s+\d`, i, regexp.QuoteMeta(key), digest(tok)))
	for _, ok := range []bool{row.MatchString(r.stdout), strings.Contains(r.stdout, "held: 1 of 3 permits (a holder needs 2 of 3 masters)"),
		strings.Contains(r.stdout, "permit count: 3, the same on every master"), strings.Count(r.stdout, "free") == 2} {
		if !ok {
			t.Fatalf("semaphore output:\n%s", r.stdout)
		}
	}
	checkSemaphoreJSON(t, b, name, i, tok)

	// A wrong token, an index past the count: nothing changes.
	r = b.ctl(t, "", "semaphore", name, "--release", fmt.Sprint(i), "--token", "not-the-token")
	wantCode(t, r, 1, "nothing released: no master holds this token")
	if strings.Count(r.stdout, "not owner: held by another token") != 3 {
		t.Errorf("release with a wrong token:\n%s", r.stdout)
	}
	b.want(t, tok, key)
	wantCode(t, b.ctl(t, tok+"\n", "semaphore", name, "--release", "3", "--token", "-"), 2, `permit 3: "jobs" has 3 permits (0 to 2)`)
	wantCode(t, b.ctl(t, "", "semaphore", "never-used", "--release", "0", "--token", tok), 2, "no master records a permit count")
	b.want(t, tok, key)

	// The holder's token, from stdin: released on every master.
	r = b.ctl(t, tok+"\n", "semaphore", name, "--release", fmt.Sprint(i), "--token", "-", "-o", "json")
	wantCode(t, r, 0)
	var ur unlockReport
	if err := json.Unmarshal([]byte(r.stdout), &ur); err != nil || ur.Key != key || ur.TokenDigest != digest(tok) || ur.Released != 3 {
		t.Fatalf("release JSON %q (%v)", r.stdout, err)
	}
	b.want(t, "<absent>", key)
	r = b.ctl(t, "", "semaphore", name)
	wantCode(t, r, 0)
	if !strings.Contains(r.stdout, "held: 0 of 3 permits") {
		t.Errorf("semaphore after the release:\n%s", r.stdout)
	}
	checkSemaphoreProblems(t, b, name)
	b.noTokens(t, tok)
}

// checkSemaphoreJSON checks semaphore -o json while permit i holds tok.
func checkSemaphoreJSON(t *testing.T, b *primBed, name string, i int, tok string) {
	t.Helper()
	r := b.ctl(t, "", "semaphore", name, "-o", "json")
	wantCode(t, r, 0)
	var rep semaphoreReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("%v: %s", err, r.stdout)
	}
	if rep.Name != name || rep.CountKey != quorum.PermitCountKey(name) || rep.Count != 3 || !rep.Agree || rep.Held != 1 || rep.Majority != 2 || len(rep.Permits) != 3 || len(rep.Masters) != 3 {
		t.Fatalf("semaphore JSON %+v", rep)
	}
	for _, c := range rep.Counts {
		if !c.Reachable || !c.Present || c.Count != 3 {
			t.Errorf("count %+v", c)
		}
	}
	p := rep.Permits[i]
	if p.Index != i || p.Key != quorum.PermitKey(name, i) || !p.Held || p.Holder.TokenDigest != digest(tok) || p.Holder.Nodes != 3 || p.Holder.MinPTTLMS <= 0 || p.Holder.MinPTTLMS > 60000 || len(p.Nodes) != 3 {
		t.Fatalf("permit %d: %+v", i, p)
	}
	// The JSON's field names, as scripts read them.
	var raw map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &raw); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"name", "count_key", "counts", "counts_agree", "count", "held", "permits", "majority", "masters"} {
		if _, ok := raw[f]; !ok {
			t.Errorf("semaphore JSON lacks %q: %s", f, r.stdout)
		}
	}
}

// checkSemaphoreProblems: a master that records another count, and a
// master that does not answer, are reported.
func checkSemaphoreProblems(t *testing.T, b *primBed, name string) {
	t.Helper()
	ctx := context.Background()
	countKey := quorum.PermitCountKey(name)
	b.admins[0].Set(ctx, countKey, "5", 0)
	r := b.ctl(t, "", "semaphore", name, "-o", "json")
	wantCode(t, r, 1, "different or invalid permit counts")
	var rep semaphoreReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || rep.Agree || rep.Count != 5 || len(rep.Permits) != 5 {
		t.Fatalf("semaphore JSON with a count of 5 on one master (%v): %s", err, r.stdout)
	}
	b.admins[0].Set(ctx, countKey, "3", 0)

	r = b.ctl(t, "", "semaphore", name, "--redis", b.env["ORDERS_REDIS_ADDRS"]+",127.0.0.1:1")
	wantCode(t, r, 0)
	for _, want := range []string{`(?m)^127\.0\.0\.1:1\s+unreachable$`, `(?m)^unreachable: 127\.0\.0\.1:1: `, `a holder needs 3 of 4 masters`} {
		if !regexp.MustCompile(want).MatchString(r.stdout) {
			t.Errorf("semaphore with a dead master lacks %q:\n%s", want, r.stdout)
		}
	}
}
