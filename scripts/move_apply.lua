-- Step 2 of a move between queues in different cluster slots (Push to a
-- push queue in another slot). Step 1, settle.lua in mode 'S', took the
-- deliveries out of the source queue's unacked storage and staged them in
-- its outbox, in one atomic step in the source's slot. This script, in the
-- destination's slot, puts them where a push puts them (the tail of
-- ready; a keyed delivery is upserted by its key) and records each move as
-- applied, source|take, in the destination's moved set; a move found
-- there was applied already (the same step sent again, by the pusher after
-- a lost reply or by a cleaner finishing a move whose pusher died) and
-- lands nothing. Step 3 deletes the outbox entries (HDEL, in the source's
-- slot). Records are kept MOVED_KEEP (and the set expires that long after
-- the last move): a staged move left unfinished that long (no cleaner ran
-- for a day) would be applied again.
-- Returns how many it applied.
--
-- KEYS: the destination queue's keys (see scriptKeys in keys.go)
-- ARGV[1] the source queue's name, ARGV[2..] pairs of take (the outbox
-- field) and envelope
local D = queue_keys()
local src = ARGV[1]
local MOVED_KEEP = 86400000
local now = now_ms()
local applied, published = 0, 0
for i = 2, #ARGV, 2 do
  local id = src .. '|' .. ARGV[i]
  if not redis.call('ZSCORE', D.moved, id) then
    local e = ARGV[i + 1]
    if string.byte(e, 1) == 4 and meta(e) then
      local o = keyed().adopt(D, e, now)
      if o == keyed().CREATED or o == keyed().QUEUED then
        published = published + 1
      end
    elseif string.byte(e, 1) == 6 and meta(e) then
      -- a grouped delivery joins its group's line
      grouped().add_all(D, {e}, now)
      published = published + 1
    else
      redis.call('LPUSH', D.ready, e)
      published = published + 1
    end
    redis.call('ZADD', D.moved, now, id)
    applied = applied + 1
  end
end
-- counted as published here, in the destination, once per move (as an
-- upsert is, for a keyed one): a move applied again lands nothing
tally(D.meta, 'p', published, now)
redis.call('ZREMRANGEBYSCORE', D.moved, '-inf', now - MOVED_KEEP)
redis.call('PEXPIRE', D.moved, MOVED_KEEP)
return applied
