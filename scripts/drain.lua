-- Remove up to ARGV[1] ready deliveries, highest priority first (then
-- the pending deliveries of groups, see grouped() in lib.lua), and return
-- them (wake markers and stale stubs of keyed items are skipped, not
-- counted; a keyed item's stub gives the item, which leaves its key).
-- KEYS: the queue's keys (see scriptKeys in keys.go); ARGV[1] how many
local P, n = queue_keys(), tonumber(ARGV[1])
local out = {}
while #out < n do
  local items, more = pop_ready(P, n - #out)
  for _, e in ipairs(items) do
    if string.byte(e, 1) == 5 and string.match(e, '^\5%d%d+:') then
      -- a keyed item's stub: the item, unless the stub is stale
      e = keyed().take_stub(P, e)
    end
    if e and e ~= MARKER then
      out[#out + 1] = e
    end
  end
  if not more then
    break
  end
end
if #out < n and redis.call('HGET', P.meta, 'groups') then
  -- then the pending deliveries of groups
  grouped().drain(P, n - #out, out)
end
return out
