-- Remove, pause or resume a schedule (Schedules.Remove, Pause, Resume),
-- with its timer in the same step, so that a tick being handled meanwhile
-- cannot bring it back (schedule_fire.lua finds it gone or paused).
-- Returns 1 done, 0 when there is no such schedule, -1 (resume only) when
-- it changed since the caller read it (read again).
--
-- KEYS: the set's keys, with its defs hash as own key (see scriptKeys)
-- ARGV[1] id, ARGV[2] 'R' remove, 'P' pause, 'U' resume; for resume:
-- ARGV[3] the version read, ARGV[4] the next tick (ms), ARGV[5] its
-- timer's due time, ARGV[6] the timer's keyed envelope
local P, defs = queue_keys()
local id, op = ARGV[1], ARGV[2]
local r = redis.call('HGET', defs, id)
if not r then
  return 0
end
if op == 'R' then
  redis.call('HDEL', defs, id)
  keyed().cancel(P, id)
  return 1
end
local s, def = sched_parse(r)
if op == 'P' then
  if s[2] == 0 then
    s[2] = 1
    redis.call('HSET', defs, id, sched_make(s, def))
    keyed().cancel(P, id)
  end
  return 1
end
if s[2] == 0 then
  return 1
end
if s[1] ~= tonumber(ARGV[3]) then
  return -1
end
s[2], s[3] = 0, tonumber(ARGV[4])
redis.call('HSET', defs, id, sched_make(s, def))
keyed().key_upsert(P, id, ARGV[6], 'A', tonumber(ARGV[5]), 0, now_ms())
return 1
