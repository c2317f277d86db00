-- complete.lua: mark an IN_PROGRESS record SUCCESS and save the response, if the caller owns it.
--
-- KEYS[1]  the record key
-- ARGV[1]  owner
-- ARGV[2]  response status code
-- ARGV[3]  response content type
-- ARGV[4]  response body (binary-safe)
-- ARGV[5]  the response's Location (may be empty)
--
-- Reply: 'OK'         the record is SUCCESS (also when this owner had already completed it;
--                     the first saved response is kept)
--        'NOT_FOUND'  no record (expired or deleted)
--        'NOT_OWNER'  the record belongs to another owner
-- The TTL is left as it is.
local key = KEYS[1]
local owner = ARGV[1]
if owner == '' or not tonumber(ARGV[2]) then
  return redis.error_reply('ERR idem complete: bad arguments')
end

local rec = redis.call('HMGET', key, 'state', 'owner')
if not rec[1] then
  return 'NOT_FOUND'
end
if rec[2] ~= owner then
  return 'NOT_OWNER'
end
if rec[1] == 'SUCCESS' then
  return 'OK'
end
if rec[1] ~= 'IN_PROGRESS' then
  return redis.error_reply('IDEMCORRUPT idem complete: unknown state')
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', key, 'state', 'SUCCESS', 'status', ARGV[2], 'content_type', ARGV[3],
  'body', ARGV[4], 'location', ARGV[5] or '', 'completed_at', string.format('%d', now))
redis.call('HDEL', key, 'lease_until')
return 'OK'
