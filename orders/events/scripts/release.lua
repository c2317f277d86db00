-- Drops a consumer's claim on one event, if it is still that consumer's:
-- KEYS[1] the claim key, ARGV[1] the owner token. Returns 1 when dropped,
-- 0 when the key is gone, done, or another consumer's.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
