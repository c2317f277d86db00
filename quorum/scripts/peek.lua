-- peek: find a free permit of a semaphore on this node, writing nothing.
--
-- KEYS[1..n] the permits' keys (n = ARGV[2])
-- KEYS[n+1]  a key whose presence stops acquisitions (a read-write lock's
--            waiting writer), optional
-- ARGV[1]    the index (0-based) to start looking from
-- ARGV[2]    n
--
-- Returns i+1 for the first free permit i from ARGV[1] on (wrapping), 0
-- when every permit is held, -1 when KEYS[n+1] is present.
local n = tonumber(ARGV[2])
if KEYS[n + 1] and redis.call('EXISTS', KEYS[n + 1]) == 1 then
  return -1
end
local from = tonumber(ARGV[1])
for j = 0, n - 1 do
  local i = (from + j) % n
  if redis.call('EXISTS', KEYS[i + 1]) == 0 then
    return i + 1
  end
end
return 0
