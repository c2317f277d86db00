-- leader: publish or retract an election's leader on one node.
--
-- KEYS[1]  the leader key (name .. ":leader"), value "<term>:<value>"
-- KEYS[2]  the history list (name .. ":leaders"), oldest first
-- ARGV[1]  "publish" or "retract"
-- ARGV[2]  the term
-- ARGV[3]  "<term>:<value>"                       (publish)
-- ARGV[4]  the leader key's TTL in ms              (publish)
-- ARGV[5]  how many history entries to keep        (publish)
-- ARGV[6]  the history's TTL in ms                 (publish)
--
-- publish sets the leader key and appends the entry to the history, unless
-- the node has seen a greater term (in either), so a deposed leader's late
-- write changes nothing; republishing the same term only refreshes the TTLs.
-- Returns 1 when published, 0 when a greater term was there.
-- retract deletes the leader key if it holds this term: 1 deleted, 0 not.
-- Terms are compared as Lua numbers: exact up to 2^53.
local function term(entry)
  if not entry then
    return nil
  end
  return tonumber(string.match(entry, '^(%d+):'))
end

local t = tonumber(ARGV[2])
local cur = term(redis.call('GET', KEYS[1]))
if ARGV[1] == 'retract' then
  if cur == t then
    redis.call('DEL', KEYS[1])
    return 1
  end
  return 0
end
local last = term(redis.call('LINDEX', KEYS[2], -1))
if (cur and cur > t) or (last and last > t) then
  return 0
end
redis.call('SET', KEYS[1], ARGV[3], 'PX', ARGV[4])
if last ~= t then
  redis.call('RPUSH', KEYS[2], ARGV[3])
  redis.call('LTRIM', KEYS[2], -tonumber(ARGV[5]), -1)
end
redis.call('PEXPIRE', KEYS[2], ARGV[6])
return 1
