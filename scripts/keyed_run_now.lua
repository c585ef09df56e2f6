-- Make the pending item of a key due now: a delayed one goes to the back
-- of its ready line; a parked successor runs as soon as the running
-- delivery is settled. Returns 1 when the key has a pending item, 0 when
-- not. Once per token, as upsert.lua.
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
local now = now_ms()
local kp, pk = P.kpend, P.kpark
local r = redis.call('HGET', kp, key)
out = 0
if r then
  local s, e = keyed().parse_rec(r)
  local m, stop = meta(e)
  local st = keyed().stub(m[2], s[1], key)
  if redis.call('ZREM', P.delayed, st) == 1 then
    m[8] = now
    if m[4] > 0 then
      m[5] = now + m[4]
    end
    redis.call('HSET', kp, key, keyed().make_rec(s, with_meta(e, m, stop)))
    push_ready(P, m[2], {st}, false)
  end
  out = 1
else
  r = redis.call('HGET', pk, key)
  if r then
    local s, e = keyed().parse_rec(r)
    local m, stop = meta(e)
    m[8] = now
    redis.call('HSET', pk, key, keyed().make_rec(s, with_meta(e, m, stop)))
    out = 1
  end
end
remember(rec, token, out)
return out
