-- Publish envelopes: push them to the head of ready (taken last), the
-- queue's priority-0 line. Returns how many it published: 0 when a send of
-- this call ran already.
--
-- Once per token: go-redis sends a command again when the connection
-- breaks before the reply came (Redis shutting down, a timeout), and redq
-- does too until Redis answers, so the first send may have run. Field
-- ARGV[1] of the connection's publish records holds the token of the last
-- call that ran under it; a send whose token is not newer did run, or
-- belongs to a call that is over, and does nothing. The records expire
-- REPLY_KEEP after the connection's last publish to the queue.
--
-- KEYS[1] ready, KEYS[2] the connection's publish records (a hash)
-- ARGV[1] field, ARGV[2] token, ARGV[3..] envelopes
local rec, field, token = KEYS[2], ARGV[1], tonumber(ARGV[2])
local last = tonumber(redis.call('HGET', rec, field))
if last and last >= token then
  return 0
end
for i = 3, #ARGV, 1000 do
  redis.call('LPUSH', KEYS[1], unpack(ARGV, i, math.min(i + 999, #ARGV)))
end
redis.call('HSET', rec, field, token)
redis.call('PEXPIRE', rec, REPLY_KEEP)
return #ARGV - 2
