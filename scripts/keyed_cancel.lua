-- Remove the pending item of a key, or its parked successor; never a
-- running delivery. Returns 1 when there was one, 0 when not. Once per
-- token, as upsert.lua.
--
-- KEYS: the queue's keys, with the call's record as its own key (see
-- scriptKeys in keys.go)
-- ARGV[1] token, ARGV[2] key
local P, rec = queue_keys()
local token, key = ARGV[1], ARGV[2]
local out = recalled(rec, token)
if out then
  return out
end
local kp = P.kpend
local r = redis.call('HGET', kp, key)
if r then
  local s, e = keyed().parse_rec(r)
  if redis.call('ZREM', P.delayed, keyed().stub(meta(e)[2], s[1], key)) == 0 then
    -- its stub waits in a ready list: left there, stale
    redis.call('HINCRBY', P.meta, 'kstale', 1)
  end
  redis.call('HDEL', kp, key)
  out = 1
else
  out = redis.call('HDEL', P.kpark, key)
end
remember(rec, token, out)
return out
