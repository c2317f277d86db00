-- acquire: SET the lock key to the token unless it exists, once the node
-- passes the restart guard (when the guard is on).
--
-- KEYS[1]  lock key
-- KEYS[2]  restart marker key (present only when the guard is on)
-- ARGV[1]  token
-- ARGV[2]  lease TTL in milliseconds
-- ARGV[3]  restart window in milliseconds (guard on only)
-- ARGV[4]  "1" when the operator declared the nodes durable, else "0"
--          (guard on only)
--
-- Returns
--    1  the key holds the token: set now, or already ours (this script was
--       retried by the client after a first run whose answer was lost)
--    0  the key holds another value (another owner), or is of another type
--   -r  the node may not vote yet: it (re)started less than the window ago
--       on its own clock and is not known to have kept its data; r is an
--       upper bound of the milliseconds left. Nothing is written then.
--
-- The restart guard is Redlock's delayed restart, read atomically with the
-- vote: a node votes once it has been up for the window (uptime from INFO,
-- on the node's own clock). Before that it votes only if the marker holds
-- its current run_id (an operator vouched for this very process, see
-- quorum.TrustNode), or if the nodes are declared durable, the AOF is on,
-- and the marker survived the restart (the data was kept). A durable node
-- past the window gets a marker, so that it can vote at once after a
-- restart that keeps its data. No number is formatted here, so 32-bit
-- builds (where %d overflows) behave the same.
-- The key is read first: a node that holds the key answers from it, with
-- no guard check (refusing grants nothing, and our own token is there only
-- if an earlier run of this attempt passed the guard). Only a free key,
-- which this node would grant, goes through the guard.
local cur = redis.pcall('GET', KEYS[1])
if type(cur) == 'table' then
  if cur.err and string.find(cur.err, 'WRONGTYPE', 1, true) then
    return 0
  end
  return cur
end
if cur then
  if cur == ARGV[1] then
    return 1
  end
  return 0
end
-- The fast path skips INFO, the costliest part of the script: LASTSAVE is
-- set when the process starts and only moves forward (each save), so the
-- time since the last save, less a second for its whole-second clock,
-- never exceeds the uptime. Once it reaches the window the node has been
-- up for the window and votes; a durable node still needs its marker
-- (written below, by the first vote past the window). Otherwise the
-- uptime itself decides.
if KEYS[2] and ((tonumber(redis.call('TIME')[1]) - redis.call('LASTSAVE') - 1) * 1000 < tonumber(ARGV[3])
    or (ARGV[4] == '1' and redis.call('EXISTS', KEYS[2]) == 0)) then
  local info = redis.call('INFO', 'server')
  local at = string.find(info, 'uptime_in_seconds:', 1, true)
  local up = at and tonumber(string.match(info, '^%d+', at + 18))
  if up == nil then
    return redis.error_reply('quorumlock: INFO server has no uptime_in_seconds')
  end
  local window = tonumber(ARGV[3])
  local durable = ARGV[4] == '1'
  -- uptime_in_seconds is a difference of whole seconds: the time actually
  -- elapsed since the start is more than up - 1 seconds.
  local safe = (up - 1) * 1000
  if safe < window or durable then
    local runid = string.match(info, 'run_id:(%x+)')
    if runid == nil then
      return redis.error_reply('quorumlock: INFO server has no run_id')
    end
    if safe < window then
      local marker = redis.call('GET', KEYS[2])
      local trusted = marker == runid
      if not trusted and durable and marker then
        local p = redis.call('INFO', 'persistence')
        trusted = string.find(p, 'aof_enabled:1', 1, true) ~= nil
      end
      if not trusted then
        return -(window - safe)
      end
    elseif redis.call('EXISTS', KEYS[2]) == 0 then
      redis.call('SET', KEYS[2], runid)
    end
  end
end
-- redis.call, not pcall: a refused write (OOM, MISCONF, READONLY, ...)
-- raises, so the node counts as failed, never as a vote.
redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])
return 1
