-- Ack fires of one connection: takes of a timer set, all keyed. settle.lua
-- acks any take; this is its short form for the hot path of timers, as
-- ack.lua is for plain takes, with a dozen keys instead of the queue's
-- whole block, only the helpers it needs in front of it and fewer
-- commands: one HMGET for the takes, one HDEL each for the storage and the
-- running keys, and the consumers hash looked at only when a take is not
-- there. Each take is acked as settle.lua acks it: gone from the
-- connection's storage, its lease ended, its key no longer running, and a
-- timer set meanwhile (parked behind the fire) made the key's pending item.
--
-- It answers as settle.lua does, {registered, r1, ..., rn}, and keeps its
-- record the same way under field ARGV[2] of the replies hash, so that a
-- call sent again after a lost reply gets the first call's answer, and a
-- late send of a call that is over does nothing (see settle.lua).
--
-- A timer set's items all have priority 0, so a parked timer that becomes
-- pending goes to the delayed set or the ready list, never to a priority's
-- line; a parked item of another priority is refused before anything is
-- written (the caller acks through settle.lua then).
--
-- KEYS consumers, leases, the connection's unacked, replies and lost, meta
-- (the counters), krun, kpark, kpend, kver, delayed, ready, as fireAckKeys
-- in keys.go lays them out
-- ARGV[1] connection name, ARGV[2] field, ARGV[3] token, ARGV[4..] takes
-- (fields of the unacked hash, each ending with 'k': see fetch.lua)
local conn, field, token = ARGV[1], ARGV[2], ARGV[3]
local uk, rk = KEYS[3], KEYS[4]
local n = #ARGV - 3
local before = settled_before(rk, field, token, n)
if before then
  return before
end
local fields = {}
for i = 1, n do
  fields[i] = ARGV[i + 3]
end
local es = redis.call('HMGET', uk, unpack(fields))
local out, flags = {1}, {}
local found, keys, seen, acked = {}, {}, {}, {}
local registered = nil
for i = 1, n do
  local f, e = fields[i], es[i]
  local code = 0
  if e and not acked[f] then
    acked[f] = true
    found[#found + 1] = f
    local m, stop = meta(e)
    local key = string.sub(e, stop, stop + m[7] - 1)
    if not seen[key] then
      seen[key] = true
      keys[#keys + 1] = key
    end
    code = 1
  else
    -- A cleaner unregisters a connection only once it emptied its
    -- storage, so a take found there means registered: the consumers hash
    -- is looked at only for a take that is not.
    if registered == nil then
      registered = redis.call('HEXISTS', KEYS[1], conn) == 1
    end
    if redis.call('ZSCORE', KEYS[5], f) then
      -- its lease ran out and it went back to ready (see expire_leases)
      code = 2
    end
  end
  out[i + 1] = code
  flags[i] = code
end
if registered == false and #found == 0 then
  -- A cleaner emptied this connection's storage and unregistered it: there
  -- is nothing to settle, and nothing to remember.
  out = {0}
  for i = 1, n do
    out[i + 1] = 0
  end
  return out
end
if #found > 0 then
  local pk = KEYS[8]
  local parked = nil
  if redis.call('EXISTS', pk) == 1 then
    -- timers set while their keys fired, read (and checked) before
    -- anything changes
    local rs = redis.call('HMGET', pk, unpack(keys))
    for i = 1, #keys do
      if rs[i] then
        local s, e = keyed().parse_rec(rs[i])
        if meta(e)[2] ~= 0 then
          return redis.error_reply('redq: the parked item of ' .. keys[i] .. ' has a priority: not a timer')
        end
        parked = parked or {}
        parked[#parked + 1] = {keys[i], s, e}
      end
    end
  end
  redis.call('HDEL', uk, unpack(found))
  redis.call('HDEL', KEYS[7], unpack(keys))
  if redis.call('EXISTS', KEYS[2]) == 1 then
    local members = {}
    for i, f in ipairs(found) do
      members[i] = lease_member(f, conn)
    end
    redis.call('ZREM', KEYS[2], unpack(members))
  end
  local now = now_ms()
  if parked then
    -- the keys' parked timers become their pending ones (see key_settled)
    local P = {meta = KEYS[6], kpend = KEYS[9], kver = KEYS[10], delayed = KEYS[11], ready = KEYS[12]}
    for _, p in ipairs(parked) do
      redis.call('HDEL', pk, p[1])
      keyed().place(P, p[1], p[2], p[3], now, false)
    end
  end
  -- acks count in the queue's counters (see tally in lib.lua)
  tally(KEYS[6], 'a', #found, now)
end
redis.call('HSET', rk, field, token .. '|' .. table.concat(flags))
return out
