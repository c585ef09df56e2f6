-- Read what a key has: {pending, running, envelope, updates}. pending is 1
-- when it has a pending item or a parked successor, whose envelope and
-- update count are given; running is 1 while a delivery of the key is
-- taken (its envelope is given when nothing is pending); envelope is ''
-- when the key has neither.
--
-- KEYS[1] ready (routes the call)
-- ARGV[1] queue prefix, ARGV[2] key
local P, key = ARGV[1], ARGV[2]
local running = redis.call('HGET', P .. ':krun', key)
local r
if running then
  r = redis.call('HGET', P .. ':kpark', key)
else
  r = redis.call('HGET', P .. ':kpend', key)
end
if r then
  local s, e = keyed().parse_rec(r)
  return {1, running and 1 or 0, e, s[4]}
end
if running then
  -- field:connection; a connection name has no ':'
  local field, conn = string.match(running, '^(.*):([^:]*)$')
  return {0, 1, redis.call('HGET', P .. ':unacked:' .. conn, field) or '', 0}
end
return {0, 0, '', 0}
