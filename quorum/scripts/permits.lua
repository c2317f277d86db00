-- permits: record a semaphore's permit count on this node, or read the
-- count already recorded (the first acquisition of a name records it).
--
-- KEYS[1] the count's key (no TTL: the count is fixed for the name)
-- ARGV[1] the count of the caller
--
-- Returns the count recorded: ARGV[1], or another one that the caller must
-- not use.
local cur = redis.call('GET', KEYS[1])
if cur then
  return tonumber(cur) or -1
end
redis.call('SET', KEYS[1], ARGV[1])
return tonumber(ARGV[1])
