-- Extend the lease of one take of a connection to ARGV[4] ms from now.
-- Returns {registered, r} as release.lua does (r is 1 when extended).
-- Repeating it does no harm, so its token is not looked at.
--
-- KEYS: the queue's keys with the connection's storage (see scriptKeys in
-- keys.go)
-- ARGV[1] connection, ARGV[2] the take's field,
-- ARGV[3] the call's token (unused), ARGV[4] ttr ms
local P = queue_keys()
local conn, field, ttr = ARGV[1], ARGV[2], tonumber(ARGV[4])
if redis.call('HEXISTS', P.consumers, conn) == 0 then
  return {0, 0}
end
local e, code = held(P, conn, field)
if not e then
  return {1, code}
end
if ttr > 0 then
  redis.call('ZADD', P.leases, now_ms() + ttr, lease_member(field, conn))
end
return {1, 1}
