-- Delete deliveries from the connection's unacked hash.
-- Returns {registered, r1, ..., rn}: registered is 1 while the connection is
-- registered for the queue; ri is 1 when delivery i was deleted, 0 when it
-- was not there.
-- KEYS[1] unacked hash, KEYS[2] consumers hash
-- ARGV[1] connection name, ARGV[2..] delivery ids
local out = {redis.call('HEXISTS', KEYS[2], ARGV[1])}
for i = 2, #ARGV do
  out[i] = redis.call('HDEL', KEYS[1], ARGV[i])
end
return out
