-- Move deliveries from the connection's unacked hash to a list: rejected
-- (Reject), another queue's ready (Push), or back to the head of ready.
-- Returns {registered, r1, ..., rn} as ack.lua does.
-- KEYS[1] unacked hash, KEYS[2] consumers hash, KEYS[3] destination list
-- ARGV[1] connection name, ARGV[2] 'L' to LPUSH (tail) or 'R' to RPUSH
-- (head, taken next), ARGV[3..] delivery ids
local out = {redis.call('HEXISTS', KEYS[2], ARGV[1])}
local push = 'LPUSH'
if ARGV[2] == 'R' then push = 'RPUSH' end
for i = 3, #ARGV do
  local e = redis.call('HGET', KEYS[1], ARGV[i])
  if e then
    redis.call(push, KEYS[3], e)
    redis.call('HDEL', KEYS[1], ARGV[i])
    out[i - 1] = 1
  else
    out[i - 1] = 0
  end
end
return out
