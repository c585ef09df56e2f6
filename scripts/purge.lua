-- Delete lists and return how many items each held.
-- KEYS lists to delete
local out = {}
for i, k in ipairs(KEYS) do
  out[i] = redis.call('LLEN', k)
  redis.call('DEL', k)
end
return out
