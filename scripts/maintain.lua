-- The cleaner's round on one queue: return up to ARGV[1] deliveries whose
-- lease ran out, promote up to ARGV[1] due delayed deliveries and drop up to
-- ARGV[1] expired ones from the front of the ready lines, so that a queue
-- nobody consumes still shows them as ready or expired. Returns {returned,
-- promoted, dropped, c1, ..., cn}: c1..cn name connections with leases that
-- ran out whose storage the call did not declare, and the caller comes back
-- with their keys; it repeats while any count is ARGV[1] or it is told to
-- come back.
--
-- KEYS: the queue's keys with the storage of the connections the caller
-- knows to hold leases (see scriptKeys in keys.go)
-- ARGV[1] max
local P, max = queue_keys(), tonumber(ARGV[1])
local now = now_ms()
local out = {expire_leases(P, now, max), promote(P, now, max), drop_expired(P, now, max)}
for _, c in ipairs(P.need) do
  out[#out + 1] = c
end
return out
