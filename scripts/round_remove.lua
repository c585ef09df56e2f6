-- Remove an item. Returns 1 if it was there, 0 if not (or its TTL had run
-- out: then it is removed and counted as expired).
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
out = 0
if round_live(K, ARGV[1], now_ms()) then
  round_drop(K, {ARGV[1]})
  out = 1
end
remember(K.record, ARGV[2], out)
return out
