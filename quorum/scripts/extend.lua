-- extend: compare-and-pexpire.
--
-- KEYS[1]  lock key
-- ARGV[1]  token
-- ARGV[2]  new TTL in milliseconds
--
-- Returns 1 when the key held the token and its TTL was set, 0 otherwise (the
-- key is absent, expired, or holds another owner's value, which stays
-- untouched). A node that lost the key is never re-created here.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
