-- Reject one take of a connection, storing ARGV[4] (the same delivery
-- rewritten with the reason in its headers) in rejected instead of the
-- envelope it had. Returns {registered, r} as release.lua does.
--
-- KEYS: the queue's keys with the connection's storage (see scriptKeys in
-- keys.go)
-- ARGV[1] connection, ARGV[2] the take's field,
-- ARGV[3] the call's token, ARGV[4] the envelope to keep
local P = queue_keys()
local e, reply = remove_held(P, ARGV[1], ARGV[2], ARGV[3])
if not e then
  return reply
end
redis.call('LPUSH', P.rejected, ARGV[4])
local now = now_ms()
tally(P.meta, 'r', 1, now)
if is_keyed_take(ARGV[2]) then
  keyed().key_settled(P, keyed().key_of(e), now)
elseif is_grouped_take(ARGV[2]) then
  grouped().settled(P, e, now)
end
return {1, 1}
