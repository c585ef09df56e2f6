-- Return up to ARGV[2] deliveries of a connection's unacked hash to the
-- front of ready (they are taken next, each in its priority's line), with
-- their attempt counted and their lease ended, continuing a scan at
-- ARGV[3]. With ARGV[4] == '1' (a cleaner on a dead connection) the
-- connection is unregistered from the queue once its hash is empty, in the
-- same step: its lost notes are deleted, and its replies hash and receipts
-- are left to expire after REPLY_KEEP, so that a call of the dead
-- connection whose reply was lost before the clean, sent again now, still
-- learns what it did (see settle.lua).
-- Returns {moved, next cursor, remaining}.
--
-- KEYS: the queue's keys with the connection's storage (see scriptKeys in
-- keys.go)
-- ARGV[1] connection name, ARGV[2] max, ARGV[3]
-- cursor, ARGV[4] unregister
local P = queue_keys()
local conn, max, cursor = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local c = conn_keys(P, conn)
local uk = c.uk
local fields, values, n = {}, {}, 0
-- The cursor moves on even when a step returned more than fits: going back
-- would rescan the emptied buckets on every call. What a step left behind
-- is found by the next pass from cursor 0, which the caller runs while the
-- hash is not empty.
repeat
  local res = redis.call('HSCAN', uk, cursor, 'COUNT', max)
  cursor = res[1]
  local kv = res[2]
  for i = 1, #kv, 2 do
    if n >= max then break end
    n = n + 1
    fields[n] = kv[i]
    values[n] = kv[i + 1]
  end
until cursor == '0' or n >= max
if n > 0 then
  local now = now_ms()
  local leases = redis.call('EXISTS', P.leases) == 1
  -- The loop below runs once per delivery and is most of the cleaner's
  -- cost in Lua: the common case (a plain envelope of a plain take, see
  -- again) is written out here, with counters rather than the length
  -- operator, which searches the table.
  local byte = string.byte
  local first, n0 = {}, 0
  local groups = {[0] = first}
  for i = 1, n do
    local f, e = fields[i], values[i]
    local last = byte(f, -1)
    if byte(e, 1) == 1 and last ~= 107 and last ~= 103 then
      -- as again(e, now): plain, priority 0, first attempt counted
      n0 = n0 + 1
      first[n0] = plain_again(e)
    else
      local p
      e, p = again(e, now)
      if is_keyed_take(f) then
        keyed().key_returned(P, keyed().key_of(e), e, now, now, true)
      elseif is_grouped_take(f) then
        grouped().returned(P, e, now)
      elseif p == 0 then
        n0 = n0 + 1
        first[n0] = e
      else
        add_level(groups, p, e)
      end
    end
    if leases then
      redis.call('ZREM', P.leases, lease_member(f, conn))
    end
  end
  for i = 1, n, 1000 do
    redis.call('HDEL', uk, unpack(fields, i, math.min(i + 999, n)))
  end
  push_groups(P, groups, true)
  tally(P.meta, 't', n, now)
end
local remaining = redis.call('HLEN', uk)
if remaining == 0 and ARGV[4] == '1' then
  redis.call('HDEL', P.consumers, conn)
  redis.call('DEL', c.lost)
  redis.call('PEXPIRE', c.rk, REPLY_KEEP)
  redis.call('PEXPIRE', c.done, REPLY_KEEP)
end
return {n, cursor, remaining}
