-- Reject one delivery of a connection, storing ARGV[4] (the same delivery
-- rewritten with the reason in its headers) in rejected instead of the
-- envelope it had. Returns {registered, r} as release.lua does.
--
-- KEYS[1] ready (routes the call)
-- ARGV[1] queue prefix, ARGV[2] connection, ARGV[3] delivery (see held in lib.lua), ARGV[4]
-- the envelope to keep
local P = ARGV[1]
local e, reply = remove_held(P, ARGV[2], ARGV[3])
if not e then
  return reply
end
redis.call('LPUSH', P .. ':rejected', ARGV[4])
return {1, 1}
