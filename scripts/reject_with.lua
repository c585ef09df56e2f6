-- Reject one delivery of a connection, storing ARGV[4] (the same delivery
-- rewritten with the reason in its headers) in rejected instead of the
-- envelope it had. Returns {registered, r} as release.lua does.
--
-- KEYS[1] ready (routes the call)
-- ARGV[1] queue prefix, ARGV[2] connection, ARGV[3] delivery (see held in lib.lua), ARGV[4]
-- the envelope to keep
local P, conn = ARGV[1], ARGV[2]
if redis.call('HEXISTS', P .. ':consumers', conn) == 0 then
  return {0, 0}
end
local uk = P .. ':unacked:' .. conn
local id, e, code = held(P, uk, conn, ARGV[3])
if not e then
  return {1, code}
end
redis.call('HDEL', uk, id)
redis.call('ZREM', P .. ':leases', id .. conn)
redis.call('LPUSH', P .. ':rejected', ARGV[4])
return {1, 1}
