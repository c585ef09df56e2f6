-- Read what a key has: {pending, running, envelope, updates}. pending is 1
-- when it has a pending item or a parked successor, whose envelope and
-- update count are given; running is 1 while a delivery of the key is
-- taken (its envelope is given when nothing is pending); envelope is ''
-- when the key has neither. When the key runs on a connection whose
-- storage the call did not declare, it answers {-1, connection} and the
-- caller asks again with that connection's storage.
--
-- KEYS: the queue's keys, with the storage of the connection the caller
-- believes runs the key, if any (see scriptKeys in keys.go)
-- ARGV[1] key
local P, key = queue_keys(), ARGV[1]
local running = redis.call('HGET', P.krun, key)
local r
if running then
  r = redis.call('HGET', P.kpark, key)
else
  r = redis.call('HGET', P.kpend, key)
end
if r then
  local s, e = keyed().parse_rec(r)
  return {1, running and 1 or 0, e, s[4]}
end
if running then
  -- field:connection; a connection name has no ':'
  local field, conn = string.match(running, '^(.*):([^:]*)$')
  local c = P.conns[conn]
  if not c then
    -- the caller comes back with that connection's storage declared
    return {-1, conn}
  end
  return {0, 1, redis.call('HGET', c.uk, field) or '', 0}
end
return {0, 0, '', 0}
