package placement

import "sync"

// productSet is the products seen in Postgres (they are never deleted), so
// that a request for one is not checked again.
type productSet struct {
	mu    sync.Mutex
	known map[string]struct{}
}

// maxKnown bounds the known products; past it the set starts again.
const maxKnown = 100_000

func newProductSet() *productSet { return &productSet{known: map[string]struct{}{}} }

// has reports whether product was seen in Postgres.
func (s *productSet) has(product string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.known[product]
	return ok
}

// add notes that product exists.
func (s *productSet) add(product string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.known) >= maxKnown {
		clear(s.known)
	}
	s.known[product] = struct{}{}
}
