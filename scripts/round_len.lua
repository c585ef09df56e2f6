-- The number of items whose TTL has not run out. Changes nothing.
--
-- KEYS: the round's keys (see round_lib.lua)
local K = round_keys(KEYS)
return redis.call('ZCARD', K.order) - redis.call('ZCOUNT', K.expiry, '-inf', round_int(now_ms()))
