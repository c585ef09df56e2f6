-- Move up to ARGV[1] deliveries from rejected to the tail of ready, oldest
-- rejection first. Returns how many moved.
-- KEYS[1] rejected, KEYS[2] ready
local items = redis.call('RPOP', KEYS[1], ARGV[1])
if not items then
  return 0
end
redis.call('LPUSH', KEYS[2], unpack(items))
return #items
