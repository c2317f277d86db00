package placement

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/quorumlock/quorumlock/devtools/blackhole"
	"github.com/quorumlock/quorumlock/orders/internal/answer"
	"github.com/quorumlock/quorumlock/orders/request"
	"github.com/quorumlock/quorumlock/orders/store"
)

// A transaction of a batch of six orders failed in a way that may have
// committed, and Postgres does not answer: the lookups that would tell
// share one deadline, so the six answers (503, outcome unknown) come after
// one wait, not six. (Each lookup had its own 3 s: a batch of seven held
// its clients 21 s, past their timeouts, while a primary was paused.)
func TestInDoubtBatchAnswersAfterOneWait(t *testing.T) {
	srv, err := blackhole.Listen()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	pool, err := pgxpool.New(t.Context(), srv.PostgresURL())
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	st, err := store.New(pool)
	if err != nil {
		t.Fatal(err)
	}
	p := &Placer{st: st, Config: Config{Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Retry: time.Second, OutcomeWait: 5 * time.Second}}
	batch := make([]*ticket, 6)
	res := make([]txResult, len(batch))
	for i := range batch {
		key, err := request.ParseKey(fmt.Sprintf("k%d", i))
		if err != nil {
			t.Fatal(err)
		}
		batch[i] = &ticket{ctx: t.Context(), joined: time.Now(),
			order: Order{Req: store.OrderRequest{UserID: "u1", IdempotencyKey: key, Fingerprint: "f"}}}
		res[i].err = errors.New("store: place carts: commit: unexpected EOF")
	}
	start := time.Now()
	out := p.outcomes(batch, res, Log{Batch: len(batch)})
	took := time.Since(start)
	for i, r := range out {
		if r.Answer.Kind != answer.OutcomeUnknown || r.Verdict != answer.Unknown {
			t.Errorf("order %d: %v (verdict %v), want outcome unknown", i, r.Answer.Kind, r.Verdict)
		}
	}
	if limit := 4 * time.Second; took > limit { // one lookup deadline (3 s) and room
		t.Fatalf("the batch of %d in doubt was answered after %v, want at most %v (one lookup deadline)", len(batch), took.Round(time.Millisecond), limit)
	}
	t.Logf("a batch of %d orders in doubt answered after %v", len(batch), took.Round(time.Millisecond))
}
