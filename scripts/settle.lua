-- Settle takes of one connection: delete them from its unacked hash (ack),
-- or move them to a list: rejected (reject), another queue's ready (push),
-- or the front of ready (a stopping consumer hands back its buffer; each
-- goes to its priority's line). Their leases end. A keyed take's key is
-- updated (see key_settled and key_returned in lib.lua); a keyed delivery
-- pushed on is upserted into the other queue by its key. A grouped take
-- frees its group's slot (see G.settled and G.returned in lib.lua); a
-- grouped delivery pushed on joins its group's line in the other queue.
-- Returns {registered, r1, ..., rn}: registered is 1 while the connection is
-- registered for the queue; ri is 1 when take i was there and settled, 0
-- when it was not there, 2 when it was not there because its lease ran out
-- and it went back to ready.
--
-- A call is idempotent per token: field ARGV[3] of the replies hash keeps
-- the token and results of the last call made under that field, and a call
-- repeated with the same token (its reply was lost, and go-redis or redq
-- sent it again) returns those results; a send with an older token belongs
-- to a call that is over and does nothing. That is looked at first: a cleaner
-- may have declared the connection dead since the first call, and it leaves
-- the replies hash to expire (see return_unacked.lua) so that the repeat
-- still learns what the first call did.
--
-- Acks of takes none of which is keyed or grouped, the common case, go to
-- ack.lua, its short form, instead, and acks of a timer set's fires to
-- fire_ack.lua.
--
-- KEYS: the queue's keys with the storage of the connection, and for 'P'
-- the destination queue's block (see scriptKeys in keys.go). Acks and
-- rejections are counted (see tally in lib.lua), and pushes as published
-- in the destination; hand-backs are not.
-- ARGV[1] connection name, ARGV[2] 'A' ack, 'L' reject (to the tail of
-- rejected), 'P' push on (to the tail of the destination queue's ready
-- list), 'S' followed by a queue name: stage for that queue in another
-- cluster slot (into the outbox, see move_apply.lua), 'R' hand back to the
-- front of ready; ARGV[3]
-- field, ARGV[4] token, ARGV[5..] takes (fields of the unacked hash: see
-- lease_member in lib.lua)
local conn, mode, field, token = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local P, _, D = queue_keys(mode == 'P')
local stage = nil
if string.byte(mode, 1) == 83 then
  -- 'S' and the destination's name
  stage = string.sub(mode, 2)
  mode = 'S'
end
local own = conn_keys(P, conn)
local uk, rk = own.uk, own.rk
local before = settled_before(rk, field, token, #ARGV - 4)
if before then
  return before
end
if redis.call('HEXISTS', P.consumers, conn) == 0 then
  -- A cleaner emptied this connection's storage and unregistered it: there
  -- is nothing to settle, and nothing to remember.
  local out = {0}
  for i = 5, #ARGV do
    out[#out + 1] = 0
  end
  return out
end
local lk = P.leases
local leases = redis.call('EXISTS', lk) == 1
local out, flags, groups = {1}, {}, {}
local now = nil
local settled, pushed = 0, 0
-- acks of keyed takes (timer fires) are made together first, in a few
-- calls (see ack_takes in lib.lua); the loop below answers for them
local kacked = nil
if mode == 'A' then
  local kf = {}
  for i = 5, #ARGV do
    if is_keyed_take(ARGV[i]) then
      kf[#kf + 1] = ARGV[i]
    end
  end
  if #kf > 0 then
    kacked = keyed().ack_takes(P, uk, kf)
  end
end
for i = 5, #ARGV do
  local f, done = ARGV[i], 0
  local kt = is_keyed_take(f)
  local gt = is_grouped_take(f)
  if kacked and kt then
    if kacked[f] then
      done = 1
      kacked[f] = nil -- the same take named again in the call is not there
    else
      done = lost(P, conn, f)
    end
  elseif mode == 'A' and not kt and not gt then
    done = redis.call('HDEL', uk, f)
    if done == 0 then
      done = lost(P, conn, f)
    end
  else
    local e
    e, done = held(P, conn, f)
    if e then
      redis.call('HDEL', uk, f)
      now = now or now_ms()
      if kt then
        local key = keyed().key_of(e)
        if mode == 'R' then
          keyed().key_returned(P, key, e, now, now, true)
        else
          if mode == 'P' then
            -- pushed on: upserted into the other queue by its key (counted
            -- there as an upsert is: when it made or queued an item)
            local o = keyed().adopt(D, e, now)
            if o == keyed().CREATED or o == keyed().QUEUED then
              pushed = pushed + 1
            end
          elseif mode == 'S' then
            redis.call('HSET', P.outbox, f, now .. '|' .. stage .. '|' .. e)
          elseif mode == 'L' then
            redis.call('LPUSH', P.rejected, e)
          end
          keyed().key_settled(P, key, now)
        end
      elseif gt then
        -- a grouped take: its group's slot is free, and it goes back to
        -- the front of its line (hand-back), into the push queue's line of
        -- its group, to the outbox or to rejected
        if mode == 'R' then
          grouped().returned(P, (fresh_ttl(e, now)), now)
        else
          if mode == 'P' then
            grouped().add_all(D, {(fresh_ttl(e, now))}, now)
            pushed = pushed + 1
          elseif mode == 'S' then
            redis.call('HSET', P.outbox, f, now .. '|' .. stage .. '|' .. e)
          elseif mode == 'L' then
            redis.call('LPUSH', P.rejected, e)
          end
          grouped().settled(P, e, now)
        end
      else
        -- handed back or pushed on: it waits in a ready list again, so its
        -- time to live starts again (rejected ones get it back when kicked)
        local p = 0
        if string.byte(e, 1) == 3 then
          e, p = fresh_ttl(e, now)
        end
        if mode == 'R' then
          add_level(groups, p, e)
        elseif mode == 'P' then
          redis.call('LPUSH', D.ready, e)
          pushed = pushed + 1
        elseif mode == 'S' then
          redis.call('HSET', P.outbox, f, now .. '|' .. stage .. '|' .. e)
        else
          redis.call('LPUSH', P.rejected, e)
        end
      end
    end
  end
  if done == 1 then
    settled = settled + 1
    if leases then
      redis.call('ZREM', lk, lease_member(f, conn))
    end
  end
  out[#out + 1] = done
  flags[#flags + 1] = done
end
-- The buffer comes back oldest first and must end at the front in that
-- order: RPUSH them newest first (the caller sends them so).
push_groups(P, groups, true)
-- acks and rejections count in the queue's counters (see tally in lib.lua)
if mode == 'A' then
  tally(P.meta, 'a', settled, now or now_ms())
elseif mode == 'L' then
  tally(P.meta, 'r', settled, now or now_ms())
elseif mode == 'P' then
  -- a push is published into the push queue (a staged one is counted
  -- there by move_apply.lua, once)
  tally(D.meta, 'p', pushed, now or now_ms())
end
redis.call('HSET', rk, field, token .. '|' .. table.concat(flags))
return out
