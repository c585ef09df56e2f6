-- The cleaner's step on a round: remove up to ARGV[1] items whose TTL ran
-- out, the earliest first. Returns how many; the caller repeats while that
-- is ARGV[1].
--
-- KEYS: the round's keys (see round_lib.lua); ARGV[1] max
return round_sweep(round_keys(KEYS), now_ms(), tonumber(ARGV[1]))
