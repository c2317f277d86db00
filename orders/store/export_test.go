package store

// DisableTwinLock makes s skip the advisory lock that serializes requests
// with the same (user, idempotency key), so that tests reach the
// unique-violation path that backs it.
func DisableTwinLock(s *Store) { s.noTwinLock = true }
