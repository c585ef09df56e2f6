-- Publish envelopes that need Redis's clock or more than one key: delayed
-- or scheduled ones (into the delayed set), ones with a priority (into that
-- level's ready list) and ones with a time to live (their expiry is set
-- here, by Redis's clock). Plain publishes go through publish.lua.
-- Returns how many it published: 0 when a send of this call ran already.
--
-- Once per token, as publish.lua: see there.
--
-- KEYS[1] ready (routes the call), KEYS[2] the publish record of the
-- field the call holds
-- ARGV[1] queue prefix, ARGV[2] priority, ARGV[3] ttl ms, ARGV[4] delay ms,
-- ARGV[5] due time (Redis ms, 0: none), ARGV[6] token, ARGV[7..] envelopes
local P, prio, ttl = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local delay, at = tonumber(ARGV[4]), tonumber(ARGV[5])
local last = redis.call('SET', KEYS[2], ARGV[6], 'GET', 'PX', REPLY_KEEP)
if last and tonumber(last) >= tonumber(ARGV[6]) then
  redis.call('SET', KEYS[2], last, 'PX', REPLY_KEEP)
  return 0
end
local now = now_ms()
local due = 0
if at > 0 then
  due = at
elseif delay > 0 then
  due = now + delay
end
if due > now then
  for i = 7, #ARGV do
    schedule(P, ARGV[i], due)
  end
  return #ARGV - 6
end
local items = {}
for i = 7, #ARGV do
  local e = ARGV[i]
  if ttl > 0 then
    local m, stop = meta_of(e)
    m[5] = now + ttl
    e = with_meta(e, m, stop)
  end
  items[#items + 1] = e
end
push_ready(P, prio, items, false)
return #items
