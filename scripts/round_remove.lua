-- Remove an item. Returns 1 if it was there, 0 if not (or its TTL had run
-- out: then it is removed and counted as expired).
--
-- KEYS: the round's keys (see round_lib.lua); ARGV[1] id
local K = round_keys(KEYS)
if not round_live(K, ARGV[1], now_ms()) then
  return 0
end
round_drop(K, {ARGV[1]})
return 1
