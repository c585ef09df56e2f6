-- Publish envelopes that need Redis's clock or more than one key: delayed
-- or scheduled ones (into the delayed set), ones with a priority (into that
-- level's ready list) and ones with a time to live (their expiry is set
-- here, by Redis's clock), and grouped ones (format 6, see Group: into
-- their groups' lines, or the delayed set, from where they join their
-- lines when due). Plain publishes go through publish.lua.
-- Returns how many it published: 0 when a send of this call ran already.
--
-- Once per token, as publish.lua: see there.
--
-- KEYS: the queue's keys, with the publish record of the field the call
-- holds as its own key (see scriptKeys in keys.go)
-- ARGV[1] priority, ARGV[2] ttl ms, ARGV[3] delay ms,
-- ARGV[4] due time (Redis ms, 0: none), ARGV[5] token, ARGV[6..] envelopes
-- (all grouped or none)
local P, rec = queue_keys()
local prio, ttl = tonumber(ARGV[1]), tonumber(ARGV[2])
local delay, at = tonumber(ARGV[3]), tonumber(ARGV[4])
local last = redis.call('SET', rec, ARGV[5], 'GET', 'PX', REPLY_KEEP)
if last and tonumber(last) >= tonumber(ARGV[5]) then
  redis.call('SET', rec, last, 'PX', REPLY_KEEP)
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
  for i = 6, #ARGV do
    schedule(P, ARGV[i], due)
  end
  tally(P.meta, 'p', #ARGV - 5, now)
  return #ARGV - 5
end
local items = {}
for i = 6, #ARGV do
  local e = ARGV[i]
  if ttl > 0 then
    local m, stop = meta_of(e)
    m[5] = now + ttl
    e = with_meta(e, m, stop)
  end
  items[#items + 1] = e
end
if string.byte(items[1], 1) == 6 then
  grouped().add_all(P, items, now)
else
  push_ready(P, prio, items, false)
end
tally(P.meta, 'p', #items, now)
return #items
