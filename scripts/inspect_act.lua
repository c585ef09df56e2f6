-- An Inspector's action on one delivery that it found by reading (see
-- inspector_actions.go): remove exactly that envelope from where it was
-- seen (LREM of one copy, ZREM), and only when it was still there act on
-- it, so that a delivery a consumer took (or somebody acked, deleted or
-- moved) meanwhile is left alone. Returns 1 when done, 0 when the envelope
-- was no longer there.
--
-- ARGV[1] what: 'D' delete, 'T' retry (to the back of its priority's
-- ready line, now); ARGV[2] where: 'j' rejected, 'd' delayed, or 'r'
-- followed by the priority (a ready list); ARGV[3] the envelope.
-- A retried delivery is counted as retried (see tally); one from rejected
-- starts over as if published anew (attempts 0, as ReturnRejected does),
-- a keyed one is upserted by its key.
-- KEYS: the queue's keys (see scriptKeys in keys.go)
local P = queue_keys()
local what, where, e = ARGV[1], ARGV[2], ARGV[3]
local removed
if where == 'j' then
  removed = redis.call('LREM', P.rejected, 1, e)
elseif where == 'd' then
  removed = redis.call('ZREM', P.delayed, e)
else
  local key = ready_key(P, string.sub(where, 2))
  if not key then
    return redis.error_reply('ERR bad priority')
  end
  removed = redis.call('LREM', key, 1, e)
end
if removed == 0 then
  return 0
end
if what == 'D' then
  return 1
end
local now = now_ms()
local m, stop = meta(e)
local p = 0
if m then
  p = m[2]
  if where == 'j' then
    m[1] = 0
  end
  m[5] = 0
  if m[4] > 0 then
    m[5] = now + m[4]
  end
  e = with_meta(e, m, stop)
end
if string.byte(e, 1) == 4 and m then
  keyed().adopt(P, e, now)
else
  push_ready(P, p, {e}, false)
end
tally(P.meta, 't', 1, now)
return 1
