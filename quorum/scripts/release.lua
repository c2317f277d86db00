-- release: compare-and-delete.
--
-- KEYS[1]  lock key
-- ARGV[1]  token
--
-- Returns 1 when the key held the token and was deleted, 0 otherwise (the key
-- is absent, expired, or holds another owner's value, which stays untouched).
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
