-- Return up to ARGV[2] deliveries of a connection's unacked hash to the
-- head of ready (they are taken next), continuing a scan at ARGV[3].
-- With ARGV[4] == '1' (a cleaner on a dead connection) the connection is
-- unregistered from the queue once its hash is empty, in the same step, and
-- its replies hash is deleted.
-- Returns {moved, next cursor, remaining}.
-- KEYS[1] unacked hash, KEYS[2] ready, KEYS[3] consumers hash, KEYS[4]
-- replies hash
-- ARGV[1] connection name, ARGV[2] max, ARGV[3] cursor, ARGV[4] unregister
local max = tonumber(ARGV[2])
local cursor = ARGV[3]
local fields, values = {}, {}
-- The cursor moves on even when a step returned more than fits: going back
-- would rescan the emptied buckets on every call. What a step left behind
-- is found by the next pass from cursor 0, which the caller runs while the
-- hash is not empty.
repeat
  local res = redis.call('HSCAN', KEYS[1], cursor, 'COUNT', max)
  cursor = res[1]
  local kv = res[2]
  for i = 1, #kv, 2 do
    if #fields >= max then break end
    fields[#fields + 1] = kv[i]
    values[#values + 1] = kv[i + 1]
  end
until cursor == '0' or #fields >= max
for i = 1, #fields, 1000 do
  local j = math.min(i + 999, #fields)
  redis.call('RPUSH', KEYS[2], unpack(values, i, j))
  redis.call('HDEL', KEYS[1], unpack(fields, i, j))
end
local remaining = redis.call('HLEN', KEYS[1])
if remaining == 0 and ARGV[4] == '1' then
  redis.call('HDEL', KEYS[3], ARGV[1])
  redis.call('DEL', KEYS[4])
end
return {#fields, cursor, remaining}
