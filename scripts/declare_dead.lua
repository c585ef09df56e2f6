-- Declare dead every listed connection whose heartbeat is gone: remove it
-- from the connections set, so its heartbeat can never come back and its
-- queue storage may be returned. Returns the names declared dead.
-- KEYS[1] connections set, KEYS[i+1] heartbeat key of ARGV[i]
-- ARGV[i] connection names
local dead = {}
for i, name in ipairs(ARGV) do
  if redis.call('EXISTS', KEYS[i + 1]) == 0 and redis.call('SREM', KEYS[1], name) == 1 then
    dead[#dead + 1] = name
  end
end
return dead
