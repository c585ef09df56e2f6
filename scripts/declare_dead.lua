-- Declare dead every listed connection whose heartbeat is gone: remove it
-- from the connections set, so its heartbeat can never come back and its
-- queue storage may be returned, and delete its stopped marker (set by
-- StopAllConsuming, so that the stats tell a connection that stopped
-- cleanly from a dead one until now). Returns the names declared dead.
-- KEYS[1] connections set; for connection ARGV[i], KEYS[2i] its heartbeat
-- and KEYS[2i+1] its stopped marker
-- ARGV[i] connection names
local dead = {}
for i, name in ipairs(ARGV) do
  if redis.call('EXISTS', KEYS[2 * i]) == 0 and redis.call('SREM', KEYS[1], name) == 1 then
    redis.call('DEL', KEYS[2 * i + 1])
    dead[#dead + 1] = name
  end
end
return dead
