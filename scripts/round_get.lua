-- Read an item: {data, info}, or {} when it is not there or its TTL ran
-- out. Changes nothing.
--
-- KEYS: the round's keys (see round_lib.lua); ARGV[1] id
local K = round_keys(KEYS)
local s = redis.call('HGET', K.info, ARGV[1])
if not s or round_expired(round_info(s), now_ms()) then
  return {}
end
return {redis.call('HGET', K.data, ARGV[1]) or '', s}
