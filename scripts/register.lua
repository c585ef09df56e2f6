-- Register a connection and start its heartbeat.
-- KEYS[1] connections set, KEYS[2] heartbeat key
-- ARGV[1] connection name, ARGV[2] heartbeat TTL in ms
redis.call('SADD', KEYS[1], ARGV[1])
redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[2])
return 1
