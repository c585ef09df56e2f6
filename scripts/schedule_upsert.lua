-- Create or change a schedule (Schedules.Upsert). A new or changed
-- schedule's next tick is ARGV[3], and its timer is set for ARGV[4]; but a
-- schedule whose next tick is already due keeps it, so that the tick due
-- before the change fires once (the definition it fires with is the new
-- one), and a paused schedule stays paused. Returns 1 created, 2 updated.
--
-- KEYS: the set's keys, with its defs hash as own key (see scriptKeys)
-- ARGV[1] id, ARGV[2] definition, ARGV[3] next tick (ms), ARGV[4] the
-- timer's due time (ms), ARGV[5] the timer's keyed envelope
local P, defs = queue_keys()
local id, def = ARGV[1], ARGV[2]
local nxt, due = tonumber(ARGV[3]), tonumber(ARGV[4])
local now = now_ms()
local r = redis.call('HGET', defs, id)
if not r then
  redis.call('HSET', defs, id, sched_make({1, 0, nxt, 0, 0, 0}, def))
  keyed().key_upsert(P, id, ARGV[5], 'A', due, 0, now)
  return 1
end
local s = sched_parse(r)
s[1] = s[1] + 1
if s[2] == 1 or s[3] > now then
  s[3] = nxt
  if s[2] == 0 then
    keyed().key_upsert(P, id, ARGV[5], 'A', due, 0, now)
  end
end
redis.call('HSET', defs, id, sched_make(s, def))
return 2
