-- Put an item back in the front line, to be handed out again at once, its
-- period notwithstanding: at the back of the line, so that an item that
-- keeps failing cannot starve the never-issued ones. An item already in the
-- front line keeps its place. Wakes waiting Next calls. Returns 1 if the
-- item is there, 0 if not.
--
-- Once per token (ARGV[2]), as round_add.lua.
--
-- KEYS: the round's keys and the call's record (see round_lib.lua)
-- ARGV[1] id, ARGV[2] token
local K = round_keys(KEYS)
local out = recalled(K.record, ARGV[2])
if out then
  return out
end
local id = ARGV[1]
local now = now_ms()
local m = round_live(K, id, now)
out = 0
if m then
  out = 1
  local place = tonumber(redis.call('ZSCORE', K.order, id))
  if not (place and place < 0) then
    round_to_front(K, id)
    m[5] = now
    redis.call('HSET', K.info, id, round_info_string(m))
    round_wake(K)
  end
end
remember(K.record, ARGV[2], out)
return out
