-- Record how many consumers a connection runs on a queue, only while the
-- connection is registered for it (a cleaner may have removed it).
-- KEYS[1] consumers hash; ARGV[1] connection name, ARGV[2] count,
-- ARGV[3] '1' to register the connection when it is not.
if ARGV[3] == '1' or redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
  return 1
end
return 0
