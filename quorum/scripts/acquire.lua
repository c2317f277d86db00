-- acquire: SET every lock key to the token unless one holds another value,
-- all or nothing, once the node passes the restart guard (when it is on).
--
-- KEYS[1..n] lock keys (n = ARGV[5], 1 when ARGV[5] is absent)
-- KEYS[n+1]  restart marker key (present only when the guard is on)
-- ARGV[1]    token
-- ARGV[2]    lease TTL in milliseconds
-- ARGV[3]    restart window in milliseconds (guard on only)
-- ARGV[4]    "1" when the operator declared the nodes durable, else "0"
--            (guard on only)
-- ARGV[5]    n, the number of lock keys (optional)
--
-- Returns
--    1  every key holds the token: set now, or already ours (this script was
--       retried by the client after a first run whose answer was lost)
--    0  a key holds another value (another owner), or is of another type;
--       nothing is written
--   -r  the node may not vote yet: it (re)started less than the window ago
--       on its own clock and is not known to have kept its data; r is an
--       upper bound of the milliseconds left. Nothing is written then.
--
-- The restart guard is Redlock's delayed restart, read atomically with the
-- vote: a node votes once it has been up for the window (on its own clock).
-- Before that it votes only if the marker holds its current run_id (an
-- operator vouched for this very process, see quorum.TrustNode), or if the
-- nodes are declared durable, the AOF is on, and the marker survived the
-- restart (the data was kept). A durable node past the window gets a
-- marker, so that it can vote at once after a restart that keeps its data.
-- No number is formatted here, so 32-bit builds behave the same.
local n = tonumber(ARGV[5]) or 1
local marker = KEYS[n + 1]
-- The keys are read first: a node that holds one for another owner answers
-- from it, with no guard check (refusing grants nothing, and our own token
-- is there only if an earlier run of this attempt passed the guard).
local free = 0
for i = 1, n do
  local cur = redis.pcall('GET', KEYS[i])
  if type(cur) == 'table' then
    if cur.err and string.find(cur.err, 'WRONGTYPE', 1, true) then
      return 0
    end
    return cur
  end
  if not cur then
    free = free + 1
  elseif cur ~= ARGV[1] then
    return 0
  end
end
if free == 0 then
  return 1
end
-- The fast path skips INFO, the costliest part of the script: LASTSAVE is
-- set when the process starts and only moves forward (each save), so the
-- time since the last save, less a second for its whole-second clock,
-- never exceeds the uptime. Once it reaches the window the node has been
-- up for the window and votes; a durable node still needs its marker.
-- Otherwise the uptime itself decides.
if marker and ((tonumber(redis.call('TIME')[1]) - redis.call('LASTSAVE') - 1) * 1000 < tonumber(ARGV[3])
    or (ARGV[4] == '1' and redis.call('EXISTS', marker) == 0)) then
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
      local m = redis.call('GET', marker)
      local trusted = m == runid
      if not trusted and durable and m then
        local p = redis.call('INFO', 'persistence')
        trusted = string.find(p, 'aof_enabled:1', 1, true) ~= nil
      end
      if not trusted then
        return -(window - safe)
      end
    elseif redis.call('EXISTS', marker) == 0 then
      redis.call('SET', marker, runid)
    end
  end
end
-- redis.call, not pcall: a refused write (OOM, MISCONF, READONLY, ...)
-- raises, so the node counts as failed, never as a vote. NX keeps a key
-- already ours as it is (a retry does not refresh its TTL).
for i = 1, n do
  redis.call('SET', KEYS[i], ARGV[1], 'NX', 'PX', ARGV[2])
end
return 1
