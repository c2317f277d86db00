-- admit: let the acquirer in when the node's count has room. UNSAFE over
-- several nodes (see the package documentation); one node's answer only.
--
-- KEYS[1]  the semaphore's sorted set: member = a holder's token, score =
--          the holder's expiry in milliseconds of this node's clock
-- ARGV[1]  limit (the number of permits)
-- ARGV[2]  token
-- ARGV[3]  ttl in milliseconds
--
-- Expired holders are removed first. A token already in the set has its
-- expiry moved on. Returns 1 when the token is in, 0 when the set is full.
local limit = tonumber(ARGV[1])
local ttl = tonumber(ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZSCORE', KEYS[1], ARGV[2]) == false
    and redis.call('ZCARD', KEYS[1]) >= limit then
  return 0
end
redis.call('ZADD', KEYS[1], now + ttl, ARGV[2])
if redis.call('PTTL', KEYS[1]) < ttl then
  redis.call('PEXPIRE', KEYS[1], ttl)
end
return 1
