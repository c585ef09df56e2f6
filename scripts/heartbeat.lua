-- Refresh a connection's heartbeat (its value is the TTL in ms, so that
-- the Inspector can tell its age from what is left of it), unless a cleaner declared it dead
-- (removed it from the connections set). Returns 1, or 0 when dead.
-- KEYS[1] connections set, KEYS[2] heartbeat key
-- ARGV[1] connection name, ARGV[2] heartbeat TTL in ms
if redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 0 then
  return 0
end
redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[2])
return 1
