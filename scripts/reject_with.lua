-- Reject one take of a connection, storing ARGV[5] (the same delivery
-- rewritten with the reason in its headers) in rejected instead of the
-- envelope it had. Returns {registered, r} as release.lua does.
--
-- KEYS[1] ready (routes the call)
-- ARGV[1] queue prefix, ARGV[2] connection, ARGV[3] the take's field,
-- ARGV[4] the call's token, ARGV[5] the envelope to keep
local P = ARGV[1]
local e, reply = remove_held(P, ARGV[2], ARGV[3], ARGV[4])
if not e then
  return reply
end
redis.call('LPUSH', P .. ':rejected', ARGV[5])
if is_keyed_take(ARGV[3]) then
  keyed().key_settled(P, keyed().key_of(e), now_ms())
end
return {1, 1}
