-- release.lua: delete an IN_PROGRESS record that the caller owns, so that a retry can proceed.
--
-- KEYS[1]  the record key
-- ARGV[1]  owner
--
-- Reply: 'OK'         deleted
--        'NOT_FOUND'  no record (nothing to do)
--        'NOT_OWNER'  the record belongs to another owner
--        'COMPLETED'  the record is SUCCESS; it is kept
local key = KEYS[1]
local owner = ARGV[1]
if owner == '' then
  return redis.error_reply('ERR idem release: bad arguments')
end

local rec = redis.call('HMGET', key, 'state', 'owner')
if not rec[1] then
  return 'NOT_FOUND'
end
if rec[2] ~= owner then
  return 'NOT_OWNER'
end
if rec[1] ~= 'IN_PROGRESS' then
  return 'COMPLETED'
end
redis.call('DEL', key)
return 'OK'
