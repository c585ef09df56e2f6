-- Extend the lease of one delivery of a connection to ARGV[4] ms from now.
-- Returns {registered, r} as release.lua does (r is 1 when extended).
--
-- KEYS[1] ready (routes the call)
-- ARGV[1] queue prefix, ARGV[2] connection, ARGV[3] delivery (see held in lib.lua), ARGV[4] ttr ms
local P, conn, ttr = ARGV[1], ARGV[2], tonumber(ARGV[4])
if redis.call('HEXISTS', P .. ':consumers', conn) == 0 then
  return {0, 0}
end
local id, e, code = held(P, P .. ':unacked:' .. conn, conn, ARGV[3])
if not e then
  return {1, code}
end
if ttr > 0 then
  redis.call('ZADD', P .. ':leases', now_ms() + ttr, id .. conn)
end
return {1, 1}
