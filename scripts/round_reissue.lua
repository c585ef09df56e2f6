-- Put an item back in the front line, to be handed out again at once, its
-- period notwithstanding: at the back of the line, so that an item that
-- keeps failing cannot starve the never-issued ones. An item already in the
-- front line keeps its place. Wakes waiting Next calls. Returns 1 if the
-- item is there, 0 if not.
--
-- KEYS: the round's keys (see round_lib.lua); ARGV[1] id
local K = round_keys(KEYS)
local id = ARGV[1]
local now = now_ms()
local m = round_live(K, id, now)
if not m then
  return 0
end
local place = tonumber(redis.call('ZSCORE', K.order, id))
if place and place < 0 then
  return 1
end
round_to_front(K, id)
m[5] = now
redis.call('HSET', K.info, id, round_info_string(m))
round_wake(K)
return 1
