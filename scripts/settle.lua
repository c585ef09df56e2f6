-- Settle deliveries of one connection: delete them from its unacked hash
-- (ack), or move them to a list: rejected (reject), another queue's ready
-- (push), or the head of ready (a stopping consumer hands back its buffer).
-- Returns {registered, r1, ..., rn}: registered is 1 while the connection is
-- registered for the queue; ri is 1 when delivery i was there and settled.
--
-- A call is idempotent per token: field ARGV[3] of the replies hash keeps
-- the token and results of the last call made under that field, and a call
-- repeated with the same token (its reply was lost, or go-redis sent it
-- again) returns those results instead of finding nothing to settle.
--
-- KEYS[1] unacked hash, KEYS[2] consumers hash, KEYS[3] replies hash,
-- KEYS[4] destination list (moves only)
-- ARGV[1] connection name, ARGV[2] 'A' ack, 'L' push to the tail of the
-- destination, 'R' push to its head; ARGV[3] field, ARGV[4] token,
-- ARGV[5..] delivery ids
local registered = redis.call('HEXISTS', KEYS[2], ARGV[1])
if registered == 0 then
  -- A cleaner emptied this connection's storage and unregistered it: there
  -- is nothing to settle, and nothing to remember (the cleaner deleted the
  -- replies hash; writing it again would leave it behind).
  local out = {0}
  for i = 5, #ARGV do
    out[#out + 1] = 0
  end
  return out
end
local token = ARGV[4]
local last = redis.call('HGET', KEYS[3], ARGV[3])
local out = {registered}
if last and string.sub(last, 1, #token + 1) == token .. '|' then
  for i = #token + 2, #last do
    out[#out + 1] = tonumber(string.sub(last, i, i))
  end
  return out
end
local mode = ARGV[2]
local push = 'LPUSH'
if mode == 'R' then push = 'RPUSH' end
local flags = {}
for i = 5, #ARGV do
  local done = 0
  if mode == 'A' then
    done = redis.call('HDEL', KEYS[1], ARGV[i])
  else
    local e = redis.call('HGET', KEYS[1], ARGV[i])
    if e then
      redis.call(push, KEYS[4], e)
      redis.call('HDEL', KEYS[1], ARGV[i])
      done = 1
    end
  end
  out[#out + 1] = done
  flags[#flags + 1] = tostring(done)
end
redis.call('HSET', KEYS[3], ARGV[3], token .. '|' .. table.concat(flags))
return out
