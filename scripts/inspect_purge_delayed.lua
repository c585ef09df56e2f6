-- Delete a queue's delayed deliveries (an Inspector's Purge): keyed items
-- whose stubs wait there go with them. Returns how many.
-- KEYS: the queue's keys (see scriptKeys in keys.go)
local P = queue_keys()
local n = redis.call('ZCARD', P.delayed)
for start = 0, n - 1, 1000 do
  for _, st in ipairs(redis.call('ZRANGE', P.delayed, start, start + 999)) do
    local ver, key = string.match(st, '^\5%d(%d+):(.*)$')
    if key then
      local r = redis.call('HGET', P.kpend, key)
      if r and keyed().parse_rec(r)[1] == tonumber(ver) then
        redis.call('HDEL', P.kpend, key)
      end
    end
  end
end
redis.call('DEL', P.delayed)
return n
