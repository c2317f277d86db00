package fakepay

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/quorumlock/quorumlock/orders/payment"
)

// Data file operations.
const (
	opCharge   = "charge"   // a new charge was recorded
	opComplete = "complete" // a pending charge was settled
	opCallback = "callback" // a charge's callback was delivered or given up
)

// entry is one line of the data file.
type entry struct {
	Op             string         `json:"op"`
	Key            string         `json:"key"`
	OrderID        string         `json:"order_id,omitempty"`
	AmountCents    int64          `json:"amount_cents,omitempty"`
	Status         payment.Status `json:"status,omitempty"`
	ProviderRef    string         `json:"provider_ref,omitempty"`
	ExtraCallbacks int            `json:"extra_callbacks,omitempty"`
	EventID        string         `json:"event_id,omitempty"`
	GivenUp        bool           `json:"given_up,omitempty"`
	At             time.Time      `json:"at"`
}

// journal is the append-only data file.
type journal struct {
	f    *os.File
	path string
	size int64 // bytes of whole, synced lines
}

// openJournal opens or creates the data file at path and replays every
// line through apply. A last line without its newline is the write of a
// change that was never answered (the process died before the sync
// finished): it is cut off. Any other bad line is an error matching
// [ErrCorrupt].
func openJournal(path string, apply func(entry) error, log *slog.Logger) (*journal, error) {
	_, statErr := os.Stat(path)
	created := errors.Is(statErr, fs.ErrNotExist)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("fakepay: data file: %w", err)
	}
	j := &journal{f: f, path: path}
	if err := j.replay(apply, log); err != nil {
		_ = f.Close()
		return nil, err
	}
	if created {
		// Make the new file's directory entry durable too.
		if err := syncDir(filepath.Dir(path)); err != nil {
			_ = f.Close()
			return nil, fmt.Errorf("fakepay: data file: %w", err)
		}
	}
	return j, nil
}

func (j *journal) replay(apply func(entry) error, log *slog.Logger) error {
	br := bufio.NewReader(j.f)
	for n := 1; ; n++ {
		line, err := br.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			if len(line) == 0 {
				return nil
			}
			log.Warn("fakepay: cutting off an unfinished last line of the data file", "path", j.path, "line", n, "bytes", len(line))
			if err := j.f.Truncate(j.size); err != nil {
				return fmt.Errorf("fakepay: data file: %w", err)
			}
			if err := j.f.Sync(); err != nil {
				return fmt.Errorf("fakepay: data file: %w", err)
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("fakepay: data file: %w", err)
		}
		var e entry
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&e); err != nil {
			return fmt.Errorf("%w: %s line %d: %w", ErrCorrupt, j.path, n, err)
		}
		if err := apply(e); err != nil {
			return fmt.Errorf("%w: %s line %d: %w", ErrCorrupt, j.path, n, err)
		}
		j.size += int64(len(line))
	}
}

// append writes e as one line and syncs it. On failure it cuts the file
// back to its last whole line, as far as it can.
func (j *journal) append(e entry) error {
	b, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("fakepay: data file: %w", err)
	}
	b = append(b, '\n')
	if _, err := j.f.Write(b); err != nil {
		_ = j.f.Truncate(j.size)
		return fmt.Errorf("fakepay: data file: %w", err)
	}
	if err := j.f.Sync(); err != nil {
		_ = j.f.Truncate(j.size)
		return fmt.Errorf("fakepay: data file: %w", err)
	}
	j.size += int64(len(b))
	return nil
}

func (j *journal) close() error {
	if err := j.f.Close(); err != nil {
		return fmt.Errorf("fakepay: data file: %w", err)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
