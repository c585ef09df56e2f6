-- Remove up to ARGV[2] ready deliveries, highest priority first, and return
-- them (wake markers are skipped, not counted).
-- KEYS[1] ready (routes the call); ARGV[1] queue prefix, ARGV[2] how many
local P, n = ARGV[1], tonumber(ARGV[2])
local out = {}
while #out < n do
  local items, more = pop_ready(P, n - #out)
  for _, e in ipairs(items) do
    if e ~= MARKER then
      out[#out + 1] = e
    end
  end
  if not more then
    break
  end
end
return out
