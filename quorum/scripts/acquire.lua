-- acquire: SET the lock key to the token unless it exists, after checking the
-- node's amnesia marker when the guard is on.
--
-- KEYS[1]  lock key
-- KEYS[2]  amnesia marker key (present only when the guard is on)
-- ARGV[1]  token
-- ARGV[2]  lease TTL in milliseconds
-- ARGV[3]  amnesia window in milliseconds (present only when the guard is on)
--
-- Returns
--    1  the key was set to the token (this node votes for us)
--    0  the key exists (held by another owner, or any other value)
--   -r  the node is warming up: it has no valid marker, or its marker is
--       younger than the window; r is the number of milliseconds left.
--       Nothing is written to the lock key in this case.
--
-- The marker holds the node's own TIME in milliseconds from the moment a
-- client first found the node without one. A node that lost its data lost
-- the marker too, so it cannot vote until the window has passed on its own
-- clock. A marker in the future (the node's clock went back) is restamped.
if KEYS[2] then
  local window = tonumber(ARGV[3])
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local stamp = tonumber(redis.call('GET', KEYS[2]))
  if stamp == nil or stamp > now then
    redis.call('SET', KEYS[2], string.format('%d', now))
    return -window
  end
  local age = now - stamp
  if age < window then
    return -(window - age)
  end
end
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return 1
end
return 0
