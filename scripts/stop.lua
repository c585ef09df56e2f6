-- A connection stops cleanly (StopAllConsuming): delete its heartbeat, so a
-- cleaner may return what it still holds at once, and, while it is still
-- listed, mark it stopped until that cleaner unlists it (see
-- declare_dead.lua), so that the stats tell it from a dead one. A
-- connection a cleaner unlisted already gets no marker.
-- KEYS[1] connections set, KEYS[2] heartbeat, KEYS[3] stopped marker
-- ARGV[1] connection name, ARGV[2] how long the marker may wait (ms)
redis.call('DEL', KEYS[2])
if redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 1 then
  redis.call('SET', KEYS[3], '1', 'PX', ARGV[2])
end
return 1
