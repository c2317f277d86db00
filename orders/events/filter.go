package events

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/bits-and-blooms/bloom/v3"
	"github.com/redis/go-redis/v9"
)

// MemoryFilter is a Bloom filter in the consumer's process: no round trip,
// but each process knows only what it saw itself, so a message redelivered
// to another consumer of the group is not recognised there. It holds two
// generations of capacity n each: when the current one has taken n events
// it becomes the previous one, and the oldest is dropped, so the false
// positive rate stays near the stated one (at most about twice it) however
// long the process runs. Safe for concurrent use.
type MemoryFilter struct {
	n, m, k uint
	mu      sync.Mutex
	cur     *bloom.BloomFilter
	prev    *bloom.BloomFilter
	added   uint
	total   int64
}

// NewMemoryFilter returns a filter sized for n events per generation at
// false-positive rate fp (0 < fp < 1).
func NewMemoryFilter(n uint, fp float64) (*MemoryFilter, error) {
	if n == 0 || fp <= 0 || fp >= 1 {
		return nil, fmt.Errorf("%w: bloom filter of %d events at rate %v", ErrConfig, n, fp)
	}
	m, k := bloom.EstimateParameters(n, fp)
	return &MemoryFilter{n: n, m: m, k: k, cur: bloom.New(m, k)}, nil
}

// Seen reports whether eventID may have been added (group is ignored: the
// filter belongs to one consumer).
func (f *MemoryFilter) Seen(_ context.Context, _ string, eventID string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cur.TestString(eventID) || (f.prev != nil && f.prev.TestString(eventID)), nil
}

// Add records eventID.
func (f *MemoryFilter) Add(_ context.Context, _ string, eventID string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.added >= f.n {
		f.prev, f.cur, f.added = f.cur, bloom.New(f.m, f.k), 0
	}
	f.cur.AddString(eventID)
	f.added++
	f.total++
	return nil
}

// Count returns how many events were added in this process.
func (f *MemoryFilter) Count(context.Context, string) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.total, nil
}

// RedisFilter is a Bloom filter in a Redis bitmap that every consumer of a
// group shares, so a message redelivered to another consumer is recognised
// too. It costs one round trip to test and one to add. The filter of a
// group lives in two generations of one window each
// (bloom:{group}:{window number}); an event added is recognised for at
// least one window and at most two, and n is the number of events one
// window is sized for. Safe for concurrent use.
type RedisFilter struct {
	rdb    redis.UniversalClient
	m, k   uint
	window time.Duration
	now    func() time.Time
}

// NewRedisFilter returns a filter on rdb sized for n events per window at
// false-positive rate fp. The bitmap of a generation takes about
// n·1.44·log2(1/fp) bits (1.2 MB for a million events at 1%).
func NewRedisFilter(rdb redis.UniversalClient, n uint, fp float64, window time.Duration) (*RedisFilter, error) {
	if rdb == nil || n == 0 || fp <= 0 || fp >= 1 || window <= 0 {
		return nil, fmt.Errorf("%w: redis bloom filter of %d events at rate %v over %v", ErrConfig, n, fp, window)
	}
	m, k := bloom.EstimateParameters(n, fp)
	if m > 1<<32 {
		return nil, fmt.Errorf("%w: a filter of %d bits exceeds a Redis string", ErrConfig, m)
	}
	return &RedisFilter{rdb: rdb, m: m, k: k, window: window, now: time.Now}, nil
}

func (f *RedisFilter) keys(group string) (cur, prev string) {
	g := f.now().UnixNano() / int64(f.window)
	base := "bloom:{" + group + "}:"
	return base + strconv.FormatInt(g, 10), base + strconv.FormatInt(g-1, 10)
}

// offsets are the bit positions of eventID, as BITFIELD arguments.
func (f *RedisFilter) args(op string, eventID string) []any {
	locs := bloom.Locations([]byte(eventID), f.k)
	args := make([]any, 0, 4*len(locs))
	for _, l := range locs {
		args = append(args, op, "u1", l%uint64(f.m))
		if op == "SET" {
			args = append(args, 1)
		}
	}
	return args
}

// Seen reports whether eventID may have been added for group in this
// window or the previous one.
func (f *RedisFilter) Seen(ctx context.Context, group, eventID string) (bool, error) {
	cur, prev := f.keys(group)
	args := f.args("GET", eventID)
	var a, b *redis.IntSliceCmd
	_, err := f.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		a = p.BitField(ctx, cur, args...)
		b = p.BitField(ctx, prev, args...)
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("events: bloom filter: %w", err)
	}
	all := func(v []int64) bool {
		for _, x := range v {
			if x == 0 {
				return false
			}
		}
		return len(v) > 0
	}
	return all(a.Val()) || all(b.Val()), nil
}

// Add records eventID for group in the current window.
func (f *RedisFilter) Add(ctx context.Context, group, eventID string) error {
	cur, _ := f.keys(group)
	_, err := f.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.BitField(ctx, cur, f.args("SET", eventID)...)
		p.PExpire(ctx, cur, 2*f.window+time.Minute)
		return nil
	})
	if err != nil {
		return fmt.Errorf("events: bloom filter: %w", err)
	}
	return nil
}

// Count estimates the events added for group in the current window from
// the bits set: -(m/k)·ln(1 - X/m).
func (f *RedisFilter) Count(ctx context.Context, group string) (int64, error) {
	cur, _ := f.keys(group)
	x, err := f.rdb.BitCount(ctx, cur, nil).Result()
	if err != nil {
		return -1, fmt.Errorf("events: bloom filter: %w", err)
	}
	m, k := float64(f.m), float64(f.k)
	if float64(x) >= m {
		return math.MaxInt64, nil
	}
	return int64(math.Round(-m / k * math.Log(1-float64(x)/m))), nil
}

// FalsePositiveRate is the filter's expected false-positive rate once n
// events are in one generation: (1 - e^(-k·n/m))^k.
func (f *RedisFilter) FalsePositiveRate(n uint) float64 {
	return expectedRate(f.m, f.k, n)
}

// FalsePositiveRate is the filter's expected false-positive rate once n
// events are in one generation.
func (f *MemoryFilter) FalsePositiveRate(n uint) float64 {
	return expectedRate(f.m, f.k, n)
}

func expectedRate(m, k, n uint) float64 {
	return math.Pow(1-math.Exp(-float64(k)*float64(n)/float64(m)), float64(k))
}
