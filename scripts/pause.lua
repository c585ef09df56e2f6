-- Pause (ARGV[1] '1') or resume (ARGV[1] '0') a queue. The flag is the
-- field paused of its meta hash, which fetch.lua reads: while it is set no
-- fetch hands anything out, and the callers wait on the resume list. A
-- pause empties that list; a resume that ends a pause pushes one marker
-- into it, which wakes every waiter (they move it back where it was, see
-- wait.go), and lets it expire after a minute. Returns 1 when the state
-- changed, 0 when the queue was in it already.
-- KEYS[1] the queue's meta hash, KEYS[2] its resume list
if ARGV[1] == '1' then
  local changed = redis.call('HSET', KEYS[1], 'paused', '1')
  redis.call('DEL', KEYS[2])
  return changed
end
if redis.call('HDEL', KEYS[1], 'paused') == 0 then
  return 0
end
redis.call('DEL', KEYS[2])
redis.call('LPUSH', KEYS[2], 'resumed')
redis.call('PEXPIRE', KEYS[2], 60000)
return 1
