-- Extend the lease of one take of a connection to ARGV[5] ms from now.
-- Returns {registered, r} as release.lua does (r is 1 when extended).
-- Repeating it does no harm, so its token is not looked at.
--
-- KEYS[1] ready (routes the call)
-- ARGV[1] queue prefix, ARGV[2] connection, ARGV[3] the take's field,
-- ARGV[4] the call's token (unused), ARGV[5] ttr ms
local P, conn, field, ttr = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[5])
if redis.call('HEXISTS', P .. ':consumers', conn) == 0 then
  return {0, 0}
end
local e, code = held(P, P .. ':unacked:' .. conn, conn, field)
if not e then
  return {1, code}
end
if ttr > 0 then
  redis.call('ZADD', P .. ':leases', now_ms() + ttr, lease_member(field, conn))
end
return {1, 1}
