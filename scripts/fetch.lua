-- Move up to ARGV[2] deliveries from ready into the connection's unacked
-- hash and return them. Refuses (error LOST) when the connection is not
-- registered for the queue any more: a cleaner returned its deliveries.
--
-- A call is idempotent per token: field ARGV[4] (the queue handle) of the
-- replies hash KEYS[5] remembers the handle's last token and the ids it took, and a
-- call with the same token (the client did not get the
-- reply, or go-redis sent the script again) returns those deliveries again
-- (the ones still unacked) instead of taking more. Without this, a lost reply
-- would leave deliveries in a live connection's storage that nobody works on.
--
-- KEYS[1] ready, KEYS[2] unacked hash, KEYS[3] consumers hash, KEYS[4] seq,
-- KEYS[5] replies hash
-- ARGV[1] connection name, ARGV[2] how many, ARGV[3] token, ARGV[4] handle
if redis.call('HEXISTS', KEYS[3], ARGV[1]) == 0 then
  return redis.error_reply('LOST connection is not registered for this queue')
end
local token = ARGV[3]
local last = redis.call('HGET', KEYS[5], ARGV[4])
if last and string.sub(last, 1, #token + 1) == token .. '|' then
  local ids = {}
  for i = #token + 2, #last, 12 do
    ids[#ids + 1] = string.sub(last, i, i + 11)
  end
  if #ids == 0 then
    return {}
  end
  local out = {}
  for _, e in ipairs(redis.call('HMGET', KEYS[2], unpack(ids))) do
    if e then
      out[#out + 1] = e
    end
  end
  return out
end
local items = redis.call('RPOP', KEYS[1], ARGV[2])
if not items then
  redis.call('HSET', KEYS[5], ARGV[4], token .. '|')
  return {}
end
local kv, ids, seen = {}, {}, {}
for i, e in ipairs(items) do
  local b = string.byte(e, 1)
  if #e < 13 or (b ~= 1 and b ~= 2) then
    -- pushed by another program without an envelope: wrap it
    e = '\1' .. string.format('~%011d', redis.call('INCR', KEYS[4])) .. e
    items[i] = e
  end
  local id = string.sub(e, 2, 13)
  if seen[id] then
    -- the same envelope twice in one take (a list copied by hand): the
    -- repeat gets an id of its own so both keep a slot in the hash
    id = string.format('~%011d', redis.call('INCR', KEYS[4]))
    e = string.sub(e, 1, 1) .. id .. string.sub(e, 14)
    items[i] = e
  end
  seen[id] = true
  kv[#kv + 1] = id
  kv[#kv + 1] = e
  ids[i] = id
end
redis.call('HSET', KEYS[2], unpack(kv))
redis.call('HSET', KEYS[5], ARGV[4], token .. '|' .. table.concat(ids))
return items
