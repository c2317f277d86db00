-- release: compare-and-delete every lock key, then tell the waiters.
--
-- KEYS[1..n]  lock keys
-- ARGV[1]     token
--
-- Every key that holds the token is deleted, and its deletion announced on
-- the channel "quorumlock:released:" .. key, so that Lock calls waiting for
-- it retry at once; a key that holds another owner's value stays untouched.
-- Returns 1 when every key held the token, 0 otherwise (a key absent,
-- expired, or another owner's).
local all = 1
for i = 1, #KEYS do
  if redis.call('GET', KEYS[i]) == ARGV[1] then
    redis.call('DEL', KEYS[i])
    redis.call('PUBLISH', 'quorumlock:released:' .. KEYS[i], '1')
  else
    all = 0
  end
end
return all
