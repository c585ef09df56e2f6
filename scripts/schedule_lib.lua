-- Helpers of the schedule scripts (see schedules.go), put in front of them
-- with those of lib.lua.
--
-- A schedule set is a keyed queue under the tag {schedules:name}: each
-- schedule's timer is the keyed item of its id, due at its next tick (plus
-- its jitter). Its definition is a field of the set's own key, the hash
-- defs: id -> "ver,paused,next,last,fired,skipped;" followed by the
-- definition as JSON, which only Go reads. ver counts the upserts; next is
-- the nominal time (Redis ms) of the earliest tick not yet handled, last
-- the latest tick published, fired and skipped count the ticks published
-- and skipped.

-- The record r as {ver, paused, next, last, fired, skipped} and the
-- definition.
local function sched_parse(r)
  local v, p, n, l, f, s, pos = string.match(r, '^(%d+),(%d),(%d+),(%d+),(%d+),(%d+);()')
  return {tonumber(v), tonumber(p), tonumber(n), tonumber(l), tonumber(f), tonumber(s)}, string.sub(r, pos)
end

-- The record of state s and definition def.
local function sched_make(s, def)
  return string.format('%d,%d,%d,%d,%d,%d;', s[1], s[2], s[3], s[4], s[5], s[6]) .. def
end
