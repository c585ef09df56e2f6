-- Remove the pending item of a key, or its parked successor; never a
-- running delivery (see K.cancel in lib.lua). Returns 1 when there was
-- one, 0 when not. Once per token, as upsert.lua.
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
out = keyed().cancel(P, key)
remember(rec, token, out)
return out
