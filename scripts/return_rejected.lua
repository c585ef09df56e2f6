-- Move up to ARGV[1] deliveries from rejected to the back of ready (each in
-- its priority's line), oldest rejection first, as if published anew: their
-- attempts start again from 0 and their time to live from now. A keyed
-- delivery is upserted by its key (ReplaceAll, due now). Returns how many
-- moved.
-- KEYS: the queue's keys (see scriptKeys in keys.go); ARGV[1] max
local P = queue_keys()
local items = redis.call('RPOP', P.rejected, ARGV[1])
if not items then
  return 0
end
local now = now_ms()
local groups = {}
for _, e in ipairs(items) do
  local m, stop = meta(e)
  local p = 0
  if m then
    p = m[2]
    m[1] = 0
    m[5] = 0
    if m[4] > 0 then
      m[5] = now + m[4]
    end
    e = with_meta(e, m, stop)
  end
  if string.byte(e, 1) == 4 and m then
    -- a keyed delivery: upserted by its key
    keyed().adopt(P, e, now)
  elseif string.byte(e, 1) == 6 and m then
    -- a grouped delivery: to the back of its group's line
    grouped().add_all(P, {e}, now)
  else
    add_level(groups, p, e)
  end
end
push_groups(P, groups, false)
tally(P.meta, 't', #items, now)
return #items
