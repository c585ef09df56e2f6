-- Move up to ARGV[2] deliveries from ready into the connection's unacked
-- hash and return them. Refuses (error LOST) when the connection is not
-- registered for the queue any more: a cleaner returned its deliveries.
-- KEYS[1] ready, KEYS[2] unacked hash, KEYS[3] consumers hash, KEYS[4] seq
-- ARGV[1] connection name, ARGV[2] how many
if redis.call('HEXISTS', KEYS[3], ARGV[1]) == 0 then
  return redis.error_reply('LOST connection is not registered for this queue')
end
local items = redis.call('RPOP', KEYS[1], ARGV[2])
if not items then
  return {}
end
local kv = {}
for i, e in ipairs(items) do
  local b = string.byte(e, 1)
  if #e < 13 or (b ~= 1 and b ~= 2) then
    -- pushed by another program without an envelope: wrap it
    e = '\1' .. string.format('~%011d', redis.call('INCR', KEYS[4])) .. e
    items[i] = e
  end
  kv[#kv + 1] = string.sub(e, 2, 13)
  kv[#kv + 1] = e
end
redis.call('HSET', KEYS[2], unpack(kv))
return items
