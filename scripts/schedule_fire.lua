-- Handle a schedule's tick (Schedules.Run): stage the deliveries of the
-- ticks fired in the set's outbox, for the target queue (move.go applies
-- them there once each), move the schedule's next tick on and set its
-- timer, all in one step, and only when the schedule is still as the
-- caller read it: version ARGV[2], next tick ARGV[3]. So each tick is
-- handled once, however many processes handle fires of it.
-- Returns 1 done, 0 when the schedule is gone or paused (the fire is
-- dropped), -1 when it changed since the caller read it (read again).
--
-- KEYS: the set's keys, with its defs hash as own key (see scriptKeys)
-- ARGV[1] id, ARGV[2] version, ARGV[3] next tick read (ms), ARGV[4] the
-- new next tick (ms), ARGV[5] its timer's due time, ARGV[6] the timer's
-- keyed envelope, ARGV[7] the latest tick published (0: none), ARGV[8]
-- ticks published, ARGV[9] ticks skipped, ARGV[10] the target queue,
-- ARGV[11..] pairs of outbox field and envelope
local P, defs = queue_keys()
local id = ARGV[1]
local r = redis.call('HGET', defs, id)
if not r then
  return 0
end
local s, def = sched_parse(r)
if s[2] == 1 then
  return 0
end
if s[1] ~= tonumber(ARGV[2]) or s[3] ~= tonumber(ARGV[3]) then
  return -1
end
local now = now_ms()
local dest = ARGV[10]
for i = 11, #ARGV, 2 do
  redis.call('HSET', P.outbox, ARGV[i], now .. '|' .. dest .. '|' .. ARGV[i + 1])
end
s[3] = tonumber(ARGV[4])
if tonumber(ARGV[7]) > 0 then
  s[4] = tonumber(ARGV[7])
end
s[5] = s[5] + tonumber(ARGV[8])
s[6] = s[6] + tonumber(ARGV[9])
redis.call('HSET', defs, id, sched_make(s, def))
keyed().key_upsert(P, id, ARGV[6], 'A', tonumber(ARGV[5]), 0, now)
return 1
