-- The guard of a plain publish. A plain publish is one MULTI/EXEC: an
-- LPUSH of the envelopes to the head of ready (the payloads never pass
-- through Lua, which would cost about 0.3µs a payload), then this script,
-- which makes the transaction run once per token.
--
-- go-redis sends a command again when the connection breaks before the
-- reply came (Redis shutting down, a timeout), and redq does too until
-- Redis answers, so the first send may have run, or may even run later
-- (it waited in a socket while Redis was paused). KEYS[2], the record of
-- the publish field that the call holds, keeps the token of the last call
-- that ran under that field. A send whose token is not newer ran already,
-- or belongs to a call that is over: its LPUSH is undone here, in the same
-- atomic step, by popping the ARGV[2] envelopes it just pushed to the head.
-- A record expires REPLY_KEEP after the last publish under its field.
-- Returns how many it published: 0 when it undid the push.
--
-- The transaction sends this script with EVAL, not EVALSHA: a guard that
-- Redis did not know (its script cache is empty after a restart) would
-- fail while the LPUSH before it ran.
--
-- KEYS[1] ready, KEYS[2] the field's publish record (a string)
-- ARGV[1] token, ARGV[2] how many envelopes were pushed
local last = redis.call('SET', KEYS[2], ARGV[1], 'GET', 'PX', REPLY_KEEP)
if last and tonumber(last) >= tonumber(ARGV[1]) then
  redis.call('SET', KEYS[2], last, 'PX', REPLY_KEEP)
  redis.call('LPOP', KEYS[1], ARGV[2])
  return 0
end
return tonumber(ARGV[2])
