package checker

import (
	"maps"
	"slices"
	"sync"
)

// RWKind is the kind of one operation on a resource guarded by a
// read-write lock.
type RWKind int

// The operations on a resource guarded by a read-write lock.
const (
	// ReadBegin: a reader starts reading. Readers carry no fence, and the
	// resource checks nothing of theirs.
	ReadBegin RWKind = iota + 1
	// ReadEnd: the reader is done.
	ReadEnd
	// WriteBegin: a writer writes with its lease's fence; in Fenced mode
	// the resource refuses a fence below the last writer's.
	WriteBegin
	// WriteEnd: the writer is done.
	WriteEnd
)

// RWOp is one operation on a resource guarded by a read-write lock, in the
// order the resource saw them.
type RWOp struct {
	Kind   RWKind
	Holder string
	// Fence is the writer's fence (WriteBegin only).
	Fence int64
}

// RWVerdict is the verdict on a resource guarded by a read-write lock.
type RWVerdict struct {
	Report
	// Reads counts the reads begun; Writes the writes accepted, Rejected
	// those refused for a stale fence.
	Reads, Writes, Rejected int
	// MaxReaders is the largest number of readers inside at once.
	MaxReaders int
}

// RWResource is a model resource guarded by a read-write lock. Readers
// read without a fence; a writer writes with its fence, and in Fenced mode
// the resource refuses a fence below the last writer's, and a newer
// writer's fence ends the older writer's time inside. Its Verdict lists
// every read that overlapped an accepted write, and every two writers
// inside at once. It is safe for concurrent use: its order of operations
// is the order its methods were called in.
type RWResource struct {
	mu        sync.Mutex
	mode      Mode
	pos       int64
	readers   map[string]int64 // reader -> op it began at
	writers   map[string]int64 // writer inside -> its fence
	lastFence int64
	v         RWVerdict
}

// NewRWResource returns an empty resource.
func NewRWResource(mode Mode) *RWResource {
	return &RWResource{mode: mode, readers: map[string]int64{}, writers: map[string]int64{}}
}

// CheckRW judges a recorded history: ops in the order the resource saw
// them.
func CheckRW(mode Mode, ops []RWOp) RWVerdict {
	r := NewRWResource(mode)
	for _, op := range ops {
		switch op.Kind {
		case ReadBegin:
			r.BeginRead(op.Holder)
		case ReadEnd:
			r.EndRead(op.Holder)
		case WriteBegin:
			r.BeginWrite(op.Holder, op.Fence)
		case WriteEnd:
			r.EndWrite(op.Holder)
		default:
			r.mu.Lock()
			r.v.add("operation %+v has no kind", op)
			r.mu.Unlock()
		}
	}
	return r.Verdict()
}

// BeginRead records that holder started reading. A read that begins while
// a writer is inside is a violation.
func (r *RWResource) BeginRead(holder string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pos++
	if _, ok := r.readers[holder]; ok {
		return
	}
	r.v.Reads++
	r.readers[holder] = r.pos
	r.v.MaxReaders = max(r.v.MaxReaders, len(r.readers))
	for _, w := range slices.Sorted(maps.Keys(r.writers)) {
		r.v.add("read by %s began at op %d while %s (fence %d) was writing", holder, r.pos, w, r.writers[w])
	}
}

// EndRead records that holder finished reading.
func (r *RWResource) EndRead(holder string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pos++
	delete(r.readers, holder)
}

// BeginWrite records a write by holder with its fence, and reports whether
// the resource accepted it. An accepted write while readers or another
// writer are inside is a violation.
func (r *RWResource) BeginWrite(holder string, fence int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pos++
	if r.mode == Fenced {
		if fence <= 0 {
			r.v.add("write by %s with no fence (%d) at op %d", holder, fence, r.pos)
			r.v.Rejected++
			return false
		}
		if fence < r.lastFence {
			r.v.Rejected++
			return false
		}
		if fence > r.lastFence {
			// Every older writer is shut out from now on.
			for w := range r.writers {
				if w != holder {
					delete(r.writers, w)
				}
			}
			r.lastFence = fence
		}
	}
	r.v.Writes++
	if f, ok := r.writers[holder]; ok {
		r.writers[holder] = max(f, fence)
		return true
	}
	for _, w := range slices.Sorted(maps.Keys(r.writers)) {
		r.v.add("write by %s (fence %d) began at op %d while %s (fence %d) was writing", holder, fence, r.pos, w, r.writers[w])
	}
	for _, rd := range slices.Sorted(maps.Keys(r.readers)) {
		r.v.add("write by %s (fence %d) began at op %d while %s was reading (since op %d)", holder, fence, r.pos, rd, r.readers[rd])
	}
	r.writers[holder] = fence
	return true
}

// EndWrite records that holder finished writing.
func (r *RWResource) EndWrite(holder string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pos++
	delete(r.writers, holder)
}

// Verdict judges the operations recorded so far.
func (r *RWResource) Verdict() RWVerdict {
	r.mu.Lock()
	defer r.mu.Unlock()
	v := r.v
	v.Checked = int(r.pos)
	v.Violations = append([]string(nil), r.v.Violations...)
	return v
}
