-- release: compare-and-delete, then tell the waiters.
--
-- KEYS[1]  lock key
-- ARGV[1]  token
--
-- Returns 1 when the key held the token and was deleted, 0 otherwise (the key
-- is absent, expired, or holds another owner's value, which stays untouched).
-- A deletion is announced on the channel "quorumlock:released:" .. KEYS[1],
-- so that Lock calls waiting for the key retry at once.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', 'quorumlock:released:' .. KEYS[1], '1')
  return 1
end
return 0
