-- semaphore: a counting semaphore on ONE Redis node, the single-node
-- contender of the semaphore scenarios (safe on one node: the script runs
-- atomically; it has no fault tolerance).
--
-- KEYS[1]  the holders' sorted set: member = a holder's token, score = its
--          expiry in milliseconds of this node's clock
-- ARGV[1]  permits
-- ARGV[2]  token (fresh for every attempt)
-- ARGV[3]  ttl in milliseconds
--
-- Drops the expired holders, then admits the token when fewer than permits
-- remain. Returns 1 when admitted, 0 when every permit is held.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then
  return 0
end
redis.call('ZADD', KEYS[1], now + ttl, ARGV[2])
redis.call('PEXPIRE', KEYS[1], ttl)
return 1
