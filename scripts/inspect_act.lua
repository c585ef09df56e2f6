-- An Inspector's action on one delivery that it found by reading (see
-- inspector_actions.go): remove exactly that envelope from where it was
-- seen (LREM of one copy, ZREM), and only when it was still there act on
-- it, so that a delivery a consumer took (or somebody acked, deleted or
-- moved) meanwhile is left alone. Returns 1 when done, 0 when the envelope
-- was no longer there.
--
-- ARGV[1] what: 'D' delete, 'T' retry (to the back of its priority's
-- ready line, now); ARGV[2] where: 'j' rejected, 'd' delayed, 'r'
-- followed by the priority (a ready list), 'k' a pending keyed item or
-- 'g' a pending grouped delivery (see below); ARGV[3] the envelope.
-- A delivery retried from rejected is counted as retried (see tally) and
-- starts over as if published anew (attempts 0, as ReturnRejected does),
-- a keyed one is upserted by its key.
-- ARGV[4] the delivery's id bytes, ARGV[5] the Inspector's name and
-- ARGV[6] the call's token: a call done leaves a receipt (id|token) in the
-- Inspector's receipt set, so that the same call sent again (its reply was
-- lost, and go-redis or the Inspector resends it) answers done instead of
-- "no longer there" (see remove_held in lib.lua).
-- KEYS: the queue's keys (see scriptKeys in keys.go), then the Inspector's
-- connection storage (connKeys), of which it uses the receipt set.
local P = queue_keys()
local what, where, e = ARGV[1], ARGV[2], ARGV[3]
local rk = conn_keys(P, ARGV[5]).done
local rm = ARGV[4] .. '|' .. ARGV[6]
if receipt_found(rk, rm) then
  return 1
end

-- act does the action: 1 done, 0 the delivery was no longer there.
local function act()
  -- A pending keyed item, by key (ARGV[3]) and its delivery id (ARGV[4], the
  -- id bytes): acts only when the key's pending record still holds that id,
  -- so that an item taken meanwhile, and whatever the key holds since (a new
  -- item, a parked successor, which is in kpark and never touched here), is
  -- left alone. 'D' removes the item (its stub from the delayed set, or left
  -- stale in its ready list, as keyed_cancel.lua); 'T' makes it due now (as
  -- keyed_run_now.lua). Not counted: the item was not taken.
  if where == 'k' then
    local K = keyed()
    local key, id = ARGV[3], ARGV[4]
    local kp = P.kpend
    local r = redis.call('HGET', kp, key)
    if not r then
      return 0
    end
    local s, ke = K.parse_rec(r)
    if string.sub(ke, 2, IDLEN + 1) ~= id then
      return 0
    end
    local m, stop = meta(ke)
    local st = K.stub(m[2], s[1], key)
    local delayed = redis.call('ZREM', P.delayed, st) == 1
    if what == 'D' then
      if not delayed then
        -- its stub waits in a ready list: left there, stale
        redis.call('HINCRBY', P.meta, 'kstale', 1)
      end
      redis.call('HDEL', kp, key)
      return 1
    end
    if delayed then
      local now = now_ms()
      m[8] = now
      if m[4] > 0 then
        m[5] = now + m[4]
      end
      redis.call('HSET', kp, key, K.make_rec(s, with_meta(ke, m, stop)))
      push_ready(P, m[2], {st}, false)
    end
    return 1
  end

  -- A pending grouped delivery, by its field in gitems (ARGV[3], group\0seq)
  -- and its id (ARGV[4]): deleted only while that field still holds that
  -- delivery. Its group's line stays right (see G.removed). Only 'D' comes
  -- here (Retry refuses ready deliveries).
  if where == 'g' then
    local f = ARGV[3]
    local ge = redis.call('HGET', P.gitems, f)
    if not ge or string.sub(ge, 2, IDLEN + 1) ~= ARGV[4] then
      return 0
    end
    if what ~= 'D' then
      return redis.error_reply('ERR only delete applies to a pending grouped delivery')
    end
    redis.call('HDEL', P.gitems, f)
    local G = grouped()
    G.removed(P, G.group_of(ge))
    return 1
  end

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
  elseif string.byte(e, 1) == 6 and m then
    grouped().add_all(P, {e}, now)
  else
    push_ready(P, p, {e}, false)
  end
  -- retried counts what went back to ready after a take: a rejected
  -- delivery was taken; a delayed one that is made due now was not (one
  -- that a take released with a delay was counted by release.lua)
  if where == 'j' then
    tally(P.meta, 't', 1, now)
  end
  return 1
end

local done = act()
if done == 1 then
  leave_receipt(rk, rm, now_ms())
end
return done
