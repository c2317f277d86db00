-- repair.lua: write a SUCCESS record from the source of truth, whoever owns the record now.
--
-- KEYS[1]  the record key
-- ARGV[1]  fingerprint of the stored order
-- ARGV[2]  response status code
-- ARGV[3]  response content type
-- ARGV[4]  response body (binary-safe)
-- ARGV[5]  TTL in milliseconds for a record that did not exist (> 0)
-- ARGV[6]  the response's Location (may be empty)
--
-- Reply: 'CREATED'   there was no record; a SUCCESS record with the TTL was written
--        'REPAIRED'  the existing record is now SUCCESS; its TTL, owner, started_at and
--                    attempts are kept
local key = KEYS[1]
local ttl = tonumber(ARGV[5])
if ARGV[1] == '' or not tonumber(ARGV[2]) or not ttl or ttl <= 0 then
  return redis.error_reply('ERR idem repair: bad arguments')
end

local t = redis.call('TIME')
local now = string.format('%d', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))

local existed = redis.call('HEXISTS', key, 'state') == 1
if not existed then
  redis.call('DEL', key)
  redis.call('HSET', key, 'started_at', now, 'attempts', '0')
end
redis.call('HSET', key, 'state', 'SUCCESS', 'fingerprint', ARGV[1], 'status', ARGV[2],
  'content_type', ARGV[3], 'body', ARGV[4], 'location', ARGV[6] or '', 'completed_at', now, 'repaired_at', now)
redis.call('HDEL', key, 'lease_until')
if not existed or redis.call('PTTL', key) < 0 then
  redis.call('PEXPIRE', key, ttl)
end
if existed then
  return 'REPAIRED'
end
return 'CREATED'
