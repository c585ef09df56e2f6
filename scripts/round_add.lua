-- Add an item, or give an existing one new data and a renewed TTL. A new
-- item joins the back of the front line (handed out before every issued
-- item, after those that joined the line earlier) and wakes waiting Next
-- calls; an existing one keeps its place. Removes up to ROUND_STEP expired
-- items on the way. Returns 1 for a new item, 0 for an existing one.
--
-- Once per token (ARGV[5]): a send of a call that ran already answers
-- what it answered (see recalled in lib.lua).
--
-- KEYS: the round's keys and the call's record (see round_lib.lua)
-- ARGV[1] id, ARGV[2] data, ARGV[3] period, ARGV[4] ttl (the caller's, used
-- when none is stored), ARGV[5] token
local K = round_keys(KEYS)
local done = recalled(K.record, ARGV[5])
if done then
  return done
end
local id = ARGV[1]
local now = now_ms()
local _, ttl = round_settings(K, ARGV[3], ARGV[4])
round_sweep(K, now, ROUND_STEP)
local expireAt = 0
if ttl > 0 then
  expireAt = now + ttl
end
local m = round_live(K, id, now)
if m then
  redis.call('HSET', K.data, id, ARGV[2])
  if m[4] ~= expireAt then
    m[4] = expireAt
    redis.call('HSET', K.info, id, round_info_string(m))
    if expireAt > 0 then
      redis.call('ZADD', K.expiry, round_int(expireAt), id)
    else
      redis.call('ZREM', K.expiry, id)
    end
  end
  remember(K.record, ARGV[5], 0)
  return 0
end
round_to_front(K, id)
redis.call('HSET', K.data, id, ARGV[2])
redis.call('HSET', K.info, id, round_info_string({now, 0, 0, expireAt, now}))
if expireAt > 0 then
  redis.call('ZADD', K.expiry, round_int(expireAt), id)
end
round_wake(K)
remember(K.record, ARGV[5], 1)
return 1
