-- extend: compare-and-pexpire every lock key, all or nothing.
--
-- KEYS[1..n]  lock keys
-- ARGV[1]     token
-- ARGV[2]     new TTL in milliseconds
--
-- Returns 1 when every key held the token and its TTL was set, 0 otherwise
-- (a key absent, expired, or another owner's): then no TTL changes, and a
-- key the node lost is never re-created here.
for i = 1, #KEYS do
  if redis.call('GET', KEYS[i]) ~= ARGV[1] then
    return 0
  end
end
for i = 1, #KEYS do
  redis.call('PEXPIRE', KEYS[i], ARGV[2])
end
return 1
