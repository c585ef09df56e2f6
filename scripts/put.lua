-- Publish envelopes that need Redis's clock or more than one key: delayed
-- or scheduled ones (into the delayed set), ones with a priority (into that
-- level's ready list) and ones with a time to live (their expiry is set
-- here, by Redis's clock). Plain publishes go through publish.lua.
-- Returns how many it published: 0 when a send of this call ran already.
--
-- Once per token, as publish.lua: see there.
--
-- KEYS[1] ready (routes the call), KEYS[2] the connection's publish records
-- ARGV[1] queue prefix, ARGV[2] priority, ARGV[3] ttl ms, ARGV[4] delay ms,
-- ARGV[5] due time (Redis ms, 0: none), ARGV[6] field, ARGV[7] token,
-- ARGV[8..] envelopes
local P, prio, ttl = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local delay, at = tonumber(ARGV[4]), tonumber(ARGV[5])
local rec, field, token = KEYS[2], ARGV[6], tonumber(ARGV[7])
local last = tonumber(redis.call('HGET', rec, field))
if last and last >= token then
  return 0
end
redis.call('HSET', rec, field, token)
redis.call('PEXPIRE', rec, REPLY_KEEP)
local now = now_ms()
local due = 0
if at > 0 then
  due = at
elseif delay > 0 then
  due = now + delay
end
if due > now then
  for i = 8, #ARGV do
    schedule(P, ARGV[i], due)
  end
  return #ARGV - 7
end
local items = {}
for i = 8, #ARGV do
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
