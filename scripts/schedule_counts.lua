-- Count a schedule set (Inspector.ScheduleSets, Stats): {schedules,
-- paused, ticks published, ticks skipped, the earliest next tick of a
-- running schedule (Redis ms; 0: none)}. It reads every record once:
-- O(schedules), about a millisecond per few thousand.
--
-- KEYS: the set's keys, with its defs hash as own key (see scriptKeys)
local _, defs = queue_keys()
local n, paused, fired, skipped, nxt = 0, 0, 0, 0, 0
for _, r in ipairs(redis.call('HVALS', defs)) do
  local s = sched_parse(r)
  n = n + 1
  fired = fired + s[5]
  skipped = skipped + s[6]
  if s[2] == 1 then
    paused = paused + 1
  elseif nxt == 0 or s[3] < nxt then
    nxt = s[3]
  end
end
return {n, paused, fired, skipped, nxt}
