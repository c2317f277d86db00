package main

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"
)

// An election's keys set by hand as a leader leaves them: the lease (the
// lock key NAME), the leader record NAME:leader and the history list.
// election shows them; --resign with a wrong token changes nothing, with
// the leader's token it deletes the lease and the record where the lease
// held it.
func TestElectionCommand(t *testing.T) {
	b := newPrimBed(t)
	ctx := context.Background()
	const name, tok = "orders:leader", "leader-token-7f3a"
	for i, a := range b.admins {
		a.Set(ctx, name, tok, time.Minute)
		a.Set(ctx, name+recordSuffix, "7:host-a:8080", time.Minute)
		a.RPush(ctx, name+historySuffix, "5:host-c", "6:host-b", "7:host-a:8080")
		if i == 2 { // a master that missed the last record
			a.Set(ctx, name+recordSuffix, "6:host-b", time.Minute)
			a.RPush(ctx, name+historySuffix, "garbage")
		}
	}
	r := b.ctl(t, "", "election", name)
	wantCode(t, r, 0)
	for _, want := range []string{
		"leader lease: token " + digest(tok) + " on 3 of 3 masters (2 needed)",
		"leader: term 7, value host-a:8080, on 2 of 3 masters (highest term recorded: 7)",
		"1 history entries are not <term>:<value> records",
		`(?m)^7\s+host-a:8080\s+3 of 3\n6\s+host-b\s+3 of 3\n5\s+host-c\s+3 of 3$`,
		`(?m)^\S+\s+` + digest(tok) + `\s+\S+\s+6\s+host-b\s+\S+`,
	} {
		if !strings.Contains(r.stdout, want) && !regexp.MustCompile(want).MatchString(r.stdout) {
			t.Errorf("election output lacks %q:\n%s", want, r.stdout)
		}
	}
	checkElectionJSON(t, b, name, tok)

	r = b.ctl(t, "", "election", name, "--resign", "--token", "not-the-token")
	wantCode(t, r, 1, "nothing released")
	b.want(t, tok, name)
	if got := b.values(t, name+recordSuffix); got[0] != "7:host-a:8080" || got[2] != "6:host-b" {
		t.Fatalf("a wrong token changed the records: %q", got)
	}

	// Master 1's lease is another token's: it keeps its lease and record.
	b.admins[1].Set(ctx, name, "someone-else", time.Minute)
	r = b.ctl(t, tok+"\n", "election", name, "--resign", "--token", "-")
	wantCode(t, r, 0)
	if !strings.Contains(r.stdout, "released on 2 of 3 masters") || !strings.Contains(r.stdout, "deleted with it where released: "+name+recordSuffix) {
		t.Fatalf("resign:\n%s", r.stdout)
	}
	if got := b.values(t, name); got[0] != "<absent>" || got[1] != "someone-else" || got[2] != "<absent>" {
		t.Fatalf("after resign the leases are %q", got)
	}
	if got := b.values(t, name+recordSuffix); got[0] != "<absent>" || got[1] != "7:host-a:8080" || got[2] != "<absent>" {
		t.Fatalf("after resign the records are %q", got)
	}
	if n := b.admins[0].LLen(ctx, name+historySuffix).Val(); n != 3 {
		t.Fatalf("resign changed the history: %d entries", n)
	}
	b.noTokens(t, tok, "someone-else")
}

// checkElectionJSON checks election -o json against the keys set by hand.
func checkElectionJSON(t *testing.T, b *primBed, name, tok string) {
	t.Helper()
	r := b.ctl(t, "", "election", name, "-o", "json")
	wantCode(t, r, 0)
	var rep electionReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("%v: %s", err, r.stdout)
	}
	if rep.Name != name || !rep.Lease.Held || rep.Lease.Holder.TokenDigest != digest(tok) || rep.Lease.Holder.Nodes != 3 ||
		rep.RecordKey != name+recordSuffix || rep.HistoryKey != name+historySuffix || rep.MaxTerm != 7 || rep.Malformed != 1 || len(rep.Masters) != 3 {
		t.Fatalf("election JSON %+v", rep)
	}
	if a := rep.Agreed; a == nil || a.Term != 7 || a.Value != "host-a:8080" || a.Nodes != 2 {
		t.Fatalf("agreed leader %+v", a)
	}
	if rec := rep.Records[2]; !rec.Present || rec.Term != 6 || rec.Value != "host-b" || rec.PTTLMS <= 0 {
		t.Fatalf("record on master 2: %+v", rec)
	}
	want := []leaderEntry{{7, "host-a:8080", 3}, {6, "host-b", 3}, {5, "host-c", 3}}
	if len(rep.History) != len(want) {
		t.Fatalf("history %+v, want %+v", rep.History, want)
	}
	for i := range want {
		if rep.History[i] != want[i] {
			t.Fatalf("history %+v, want %+v", rep.History, want)
		}
	}
}
