-- The cleaner's round on one queue: return up to ARGV[2] deliveries whose
-- lease ran out, promote up to ARGV[2] due delayed deliveries and drop up to
-- ARGV[2] expired ones from the front of the ready lines, so that a queue
-- nobody consumes still shows them as ready or expired. Returns {returned,
-- promoted, dropped}; the caller repeats while any is ARGV[2].
--
-- KEYS[1] ready (routes the call)
-- ARGV[1] queue prefix, ARGV[2] max
local P, max = ARGV[1], tonumber(ARGV[2])
local now = now_ms()
return {expire_leases(P, now, max), promote(P, now, max), drop_expired(P, now, max)}
