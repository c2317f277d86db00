-- unlock: compare-and-delete of lock keys on one master, as the lock's own
-- release does (quorum/scripts/release.lua), with one answer per key.
--
-- KEYS[1..m]    lock keys (m = ARGV[2])
-- KEYS[m+1..n]  companions of KEYS[1]: deleted with it where it is released
-- ARGV[1]       the holder's token
-- ARGV[2]       m
--
-- Each lock key that holds the token is deleted, and its deletion announced
-- on the channel "quorumlock:released:" .. key, so that the Lock calls
-- waiting for it retry at once; a key that holds another value stays
-- untouched. Returns, for each lock key, 1 (released), 0 (held by another
-- token) or -1 (absent).
local m = tonumber(ARGV[2])
local out = {}
for i = 1, m do
  local v = redis.call('GET', KEYS[i])
  if v == ARGV[1] then
    redis.call('DEL', KEYS[i])
    redis.call('PUBLISH', 'quorumlock:released:' .. KEYS[i], '1')
    out[i] = 1
  elseif v then
    out[i] = 0
  else
    out[i] = -1
  end
end
if out[1] == 1 then
  for i = m + 1, #KEYS do
    redis.call('DEL', KEYS[i])
  end
end
return out
