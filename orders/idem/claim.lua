-- claim.lua: claim the idempotency record of one (user, Idempotency-Key).
--
-- KEYS[1]  the record key (a hash)
-- ARGV[1]  request fingerprint
-- ARGV[2]  owner: a unique id of the caller's attempt
-- ARGV[3]  processing lease, milliseconds (> 0)
-- ARGV[4]  record TTL, milliseconds (> 0)
--
-- Reply: {outcome, attempts, started_at_ms, lease_ms [, status, content_type, body, location]}
--   CREATED              new record, IN_PROGRESS, owned by ARGV[2]; lease_ms is the lease granted
--   TAKEOVER             the previous owner's lease had run out; ARGV[2] now owns the record,
--                        attempts was incremented; lease_ms is the lease granted
--   IN_PROGRESS          another owner holds an unexpired lease; lease_ms is what is left of it
--   SUCCESS              the saved response follows (status, content_type, body, location)
--   FINGERPRINT_MISMATCH the record was made for a different request (checked before the state)
-- A repeated claim by the current owner within its lease answers CREATED (attempts = 1) or
-- TAKEOVER (attempts > 1) again, with what is left of the lease, and changes nothing.
-- Times come from the node's clock (TIME).
local key = KEYS[1]
local fp = ARGV[1]
local owner = ARGV[2]
local lease = tonumber(ARGV[3])
local ttl = tonumber(ARGV[4])
if fp == '' or owner == '' or not lease or lease <= 0 or not ttl or ttl <= 0 then
  return redis.error_reply('ERR idem claim: bad arguments')
end

local function int(n)
  return string.format('%d', n)
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local rec = redis.call('HMGET', key, 'state', 'fingerprint', 'owner', 'lease_until', 'attempts',
  'started_at', 'status', 'content_type', 'body', 'location')
local state = rec[1]

if not state then
  -- No record. A hash without a state is never written by these scripts: replace it.
  redis.call('DEL', key)
  redis.call('HSET', key, 'state', 'IN_PROGRESS', 'fingerprint', fp, 'owner', owner,
    'started_at', int(now), 'attempts', '1', 'lease_until', int(now + lease))
  redis.call('PEXPIRE', key, ttl)
  return {'CREATED', 1, now, lease}
end

local attempts = tonumber(rec[5]) or 0
local started = tonumber(rec[6]) or 0

if rec[2] ~= fp then
  return {'FINGERPRINT_MISMATCH', attempts, started, 0}
end

if state == 'SUCCESS' then
  return {'SUCCESS', attempts, started, 0, tonumber(rec[7]) or 0, rec[8] or '', rec[9] or '', rec[10] or ''}
end

if state ~= 'IN_PROGRESS' then
  return redis.error_reply('IDEMCORRUPT idem claim: unknown state')
end

local lease_until = tonumber(rec[4]) or 0
if lease_until > now then
  if rec[3] == owner then
    if attempts <= 1 then
      return {'CREATED', attempts, started, lease_until - now}
    end
    return {'TAKEOVER', attempts, started, lease_until - now}
  end
  return {'IN_PROGRESS', attempts, started, lease_until - now}
end

-- The lease ran out: take the record over.
attempts = redis.call('HINCRBY', key, 'attempts', 1)
redis.call('HSET', key, 'owner', owner, 'lease_until', int(now + lease), 'taken_over_at', int(now))
-- Keep the record at least for the new lease.
local pttl = redis.call('PTTL', key)
if pttl >= 0 and pttl < lease then
  redis.call('PEXPIRE', key, lease)
end
return {'TAKEOVER', attempts, started, lease}
