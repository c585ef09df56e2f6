-- Settle takes of one connection: delete them from its unacked hash (ack),
-- or move them to a list: rejected (reject), another queue's ready (push),
-- or the front of ready (a stopping consumer hands back its buffer; each
-- goes to its priority's line). Their leases end. A keyed take's key is
-- updated (see key_settled and key_returned in lib.lua); a keyed delivery
-- pushed on is upserted into the other queue by its key.
-- Returns {registered, r1, ..., rn}: registered is 1 while the connection is
-- registered for the queue; ri is 1 when take i was there and settled, 0
-- when it was not there, 2 when it was not there because its lease ran out
-- and it went back to ready.
--
-- A call is idempotent per token: field ARGV[4] of the replies hash keeps
-- the token and results of the last call made under that field, and a call
-- repeated with the same token (its reply was lost, and go-redis or redq
-- sent it again) returns those results; a send with an older token belongs
-- to a call that is over and does nothing. That is looked at first: a cleaner
-- may have declared the connection dead since the first call, and it leaves
-- the replies hash to expire (see return_unacked.lua) so that the repeat
-- still learns what the first call did.
--
-- KEYS[1] the queue's ready list (routes the call), KEYS[2] destination
-- list of 'L' moves
-- ARGV[1] queue prefix, ARGV[2] connection name, ARGV[3] 'A' ack, 'L' push
-- to the tail of the destination, 'R' hand back to the front of ready;
-- ARGV[4] field, ARGV[5] token, ARGV[6..] takes (fields of the unacked
-- hash: see lease_member in lib.lua)
local P, conn, mode, field, token = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local uk, rk = P .. ':unacked:' .. conn, P .. ':replies:' .. conn
local last = redis.call('HGET', rk, field)
if last then
  local t, lt = tonumber(token), tonumber(string.match(last, '^(%d+)|'))
  if lt == t then
    local out = {1}
    for i = #token + 2, #last do
      out[#out + 1] = tonumber(string.sub(last, i, i))
    end
    return out
  elseif lt > t then
    -- a late send of a call that is over (see remembered in retry.go)
    local out = {1}
    for i = 6, #ARGV do
      out[#out + 1] = 0
    end
    return out
  end
end
if redis.call('HEXISTS', P .. ':consumers', conn) == 0 then
  -- A cleaner emptied this connection's storage and unregistered it: there
  -- is nothing to settle, and nothing to remember.
  local out = {0}
  for i = 6, #ARGV do
    out[#out + 1] = 0
  end
  return out
end
local lk = P .. ':leases'
local leases = redis.call('EXISTS', lk) == 1
local out, flags, groups = {1}, {}, {}
local now = nil
for i = 6, #ARGV do
  local f, done = ARGV[i], 0
  local kt = is_keyed_take(f)
  if mode == 'A' and not kt then
    done = redis.call('HDEL', uk, f)
    if done == 0 then
      done = lost(P, conn, f)
    end
  else
    local e
    e, done = held(P, uk, conn, f)
    if e then
      redis.call('HDEL', uk, f)
      now = now or now_ms()
      if kt then
        local key = keyed().key_of(e)
        if mode == 'R' then
          keyed().key_returned(P, key, e, now, now, true)
        else
          if mode == 'L' then
            if string.sub(KEYS[2], -6) == ':ready' then
              -- pushed on: upserted into the other queue by its key
              keyed().adopt(string.sub(KEYS[2], 1, -7), e, now)
            else
              redis.call('LPUSH', KEYS[2], e)
            end
          end
          keyed().key_settled(P, key, now)
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
        else
          redis.call('LPUSH', KEYS[2], e)
        end
      end
    end
  end
  if done == 1 and leases then
    redis.call('ZREM', lk, lease_member(f, conn))
  end
  out[#out + 1] = done
  flags[#flags + 1] = done
end
-- The buffer comes back oldest first and must end at the front in that
-- order: RPUSH them newest first (the caller sends them so).
push_groups(P, groups, true)
redis.call('HSET', rk, field, token .. '|' .. table.concat(flags))
return out
