-- handover: pass every lock key from the releasing lease's token to the
-- next holder's, all or nothing; where that cannot be, release as
-- release.lua does.
--
-- KEYS[1..n]  lock keys
-- ARGV[1]     the releasing lease's token
-- ARGV[2]     the next holder's token
-- ARGV[3]     the next lease's TTL in milliseconds
--
-- Returns
--    1  every key held ARGV[1]; each now holds ARGV[2] with the TTL
--    0  a key did not hold ARGV[1] (absent, expired, another owner's):
--       nothing is set, and every key that held ARGV[1] is deleted and
--       its deletion announced, as release.lua does
--
-- No restart guard here, as in extend.lua: the keys change hands only
-- where every one still holds the releasing token, which a guarded vote
-- (or an earlier hand-over of such a token) put there. A node that has
-- held that key since has forgotten no grant of it: any other owner's
-- token could only have been set on it after that key was gone.
for i = 1, #KEYS do
  if redis.call('GET', KEYS[i]) ~= ARGV[1] then
    for j = 1, #KEYS do
      if redis.call('GET', KEYS[j]) == ARGV[1] then
        redis.call('DEL', KEYS[j])
        redis.call('PUBLISH', 'quorumlock:released:' .. KEYS[j], '1')
      end
    end
    return 0
  end
end
-- redis.call, not pcall: a refused write raises, and the node counts as
-- failed (it may hold either token).
for i = 1, #KEYS do
  redis.call('SET', KEYS[i], ARGV[2], 'PX', ARGV[3])
end
return 1
