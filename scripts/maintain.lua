-- The cleaner's round on one queue: return up to ARGV[2] deliveries whose
-- lease ran out and promote up to ARGV[2] due delayed deliveries, so that a
-- queue nobody consumes still shows them as ready. Returns {returned,
-- promoted}; the caller repeats while either is ARGV[2].
--
-- KEYS[1] ready (routes the call)
-- ARGV[1] queue prefix, ARGV[2] max
local P, max = ARGV[1], tonumber(ARGV[2])
local now = now_ms()
return {expire_leases(P, now, max), promote(P, now, max)}
