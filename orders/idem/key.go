package idem

import (
	"fmt"
	"hash/fnv"
	"strings"

	"github.com/quorumlock/quorumlock/orders/request"
)

// KeyPrefix starts every record key.
const KeyPrefix = "idem:orders:"

// Key names the record of one user's Idempotency-Key. Build it with NewKey.
// The zero Key is invalid and every Store method rejects it.
type Key struct {
	user  string
	value string
	redis string
}

// NewKey returns the Key for the Idempotency-Key of user. The key was
// checked where it entered (request.ParseKey) and is not checked again; the
// zero request.Key is refused. The user id must have 1 to
// request.MaxUserIDLen bytes. Errors wrap ErrInvalidArgument.
//
// The Redis key is
//
//	idem:orders:<escaped user>:<key>
//
// where the user id is escaped by replacing '%' with "%25" and ':' with
// "%3A" (every other byte is kept). The escaped user id has no ':', so the
// first ':' after the prefix always ends it, and the escaping is reversible:
// two different (user, key) pairs never share a Redis key, even when the user
// id or the key contains ':' (user "a:b" with key "c" is
// "idem:orders:a%3Ab:c"; user "a" with key "b:c" is "idem:orders:a:b:c").
// Ordinary user ids such as "u1001" are kept as they are:
// "idem:orders:u1001:req-001".
func NewKey(user string, key request.Key) (Key, error) {
	switch {
	case user == "":
		return Key{}, fmt.Errorf("idem: %w: empty user id", ErrInvalidArgument)
	case key.IsZero():
		return Key{}, fmt.Errorf("idem: %w: no idempotency key", ErrInvalidArgument)
	case len(user) > request.MaxUserIDLen:
		return Key{}, fmt.Errorf("idem: %w: user id longer than %d bytes", ErrInvalidArgument, request.MaxUserIDLen)
	}
	idempotencyKey := key.String()
	var b strings.Builder
	b.Grow(len(KeyPrefix) + len(user) + 1 + len(idempotencyKey) + 8)
	b.WriteString(KeyPrefix)
	for i := 0; i < len(user); i++ {
		switch c := user[i]; c {
		case '%':
			b.WriteString("%25")
		case ':':
			b.WriteString("%3A")
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte(':')
	b.WriteString(idempotencyKey)
	return Key{user: user, value: idempotencyKey, redis: b.String()}, nil
}

// User returns the user id.
func (k Key) User() string { return k.user }

// Value returns the Idempotency-Key value.
func (k Key) Value() string { return k.value }

// String returns the Redis key.
func (k Key) String() string { return k.redis }

func (k Key) valid() bool { return k.redis != "" }

// nodeIndex picks one of n nodes for the Redis key: FNV-1a (64 bit) of the
// key, then jump consistent hashing. The choice depends only on the key and
// n, so every instance picks the same node. When a node is appended to the
// list, only about 1/n of the keys move (to the new node).
func nodeIndex(redisKey string, n int) int {
	if n <= 1 {
		return 0
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(redisKey)) // never fails
	return jump(h.Sum64(), n)
}

// jump is jump consistent hashing: it maps key to a
// bucket in [0, n). j grows by at least one per iteration, so the loop runs at
// most n times.
func jump(key uint64, n int) int {
	var b, j int64 = -1, 0
	for j < int64(n) {
		b = j
		key = key*2862933555777941757 + 1
		j = int64(float64(b+1) * (float64(int64(1)<<31) / float64((key>>33)+1)))
	}
	return int(b)
}
