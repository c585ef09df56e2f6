-- Take up to ARGV[3] deliveries into the connection's unacked hash and
-- return {e1, ..., en, fence, hint}. Before taking, it returns deliveries whose
-- lease ran out and moves due delayed deliveries to ready (bounded), so a
-- consuming queue needs no forwarder. It takes the highest priority first,
-- drops deliveries whose time to live ran out (counting them), and starts a
-- lease for each delivery that has a time to run.
--
-- hint tells the caller whether to wait: 0 means more may be ready now (or
-- leases ran out that need another call); n
-- > 0 means the next delivery is due (or lease runs out) in n ms; -1 means
-- nothing is scheduled; -2 means the connection holds its cap (below); -3
-- means the queue is paused (see pause.lua): the call takes nothing (it
-- still ends leases that ran out and promotes due deliveries), and the
-- caller waits on the queue's resume list; -4 means the reply is a
-- resend's, from the record below (the deliveries were taken by the first
-- send, and their leases started then), and is otherwise read as 0.
--
-- Refuses (error LOST) when the connection is not registered for the queue
-- any more: a cleaner returned its deliveries.
--
-- Every take gets a fence: one number per call from the queue's fence
-- counter. A delivery is stored in the unacked hash under its id followed
-- by the fence (see lease_member in lib.lua), and the verbs name that
-- field, so that a handle of an earlier take can never act on this one.
--
-- A keyed item waits in the lists as a stub (see lib.lua): taking it takes
-- the item out of the key's pending record, marks the key running, and
-- names the take with a field that ends with 'k'.
--
-- A queue with groups (see grouped() in lib.lua) hands out from its ready
-- lists and from the ring of groups in turn; a grouped take's field ends
-- with 'g', and its group counts it in flight until it is settled or
-- returned.
--
-- A call is idempotent per token: field ARGV[5] (the queue handle, or a
-- Take slot) of the connection's replies hash remembers the last token,
-- the fence and the ids it took, and a call with the same token (the
-- client did not get the reply, or go-redis sent the script again) returns
-- those deliveries again (the ones still held under that fence) instead of
-- taking more; a send with an older token (one that reached Redis late)
-- takes nothing. Without this, a lost reply would leave deliveries in a
-- live connection's storage that nobody works on.
--
-- Returns {e1, ..., en, fence, hint, need}: need names, separated by
-- spaces, the connections whose leases ran out but whose storage the call
-- did not declare (see expire_leases in lib.lua): the caller declares them
-- in a later call.
--
-- With a rate limit (fields rate_n and rate_ms of the queue's meta hash,
-- see WithRateLimit), at most rate_n takes happen in any window of
-- rate_ms, by Redis's clock. The script's own key is the queue's log of
-- takes: a sorted set of take fields by the time they were taken,
-- trimmed to the last window and expiring after one window of no takes.
-- A call takes at most rate_n minus the takes in the last window; when
-- the log is full it takes nothing, and the hint is -5 minus the ms until
-- its oldest take leaves the window (a hint of -6 or less): the caller
-- waits that long, not on ready, which would wake it at once while ready
-- holds deliveries. A call that took what the limit allowed and filled
-- the log answers that hint too.
--
-- With a cap ARGV[6] (a consumer's prefetch limit; 0: none), the
-- connection holds at most that many takes of the queue, as in rmq: it
-- takes at most the cap minus what it holds, and when it holds the cap it
-- takes nothing and answers the hint -2.
--
-- KEYS: the queue's keys, with the log of takes (above) as the script's
-- own key, and the storage of the connection and of others whose leases
-- may have run out (see scriptKeys in keys.go)
-- ARGV[1] connection, ARGV[2] how many, ARGV[3] token, ARGV[4] field,
-- ARGV[5] cap

-- The common take comes first, with only the few helpers it uses defined
-- (scripts.go puts the full path below into a function of its own, so its
-- helpers are defined only when it runs): Redis runs a script's whole text
-- on every call, and an idle consumer's wake-up waits for this one. It
-- serves a call that is its token's first send and declares only the
-- caller's storage, on a queue that is not paused and has no rate limit, no
-- groups, no priority lists in use, no due delayed deliveries and no leases
-- that ran out, when the deliveries at the tail of ready are plain
-- envelopes (format 1) with distinct ids. It takes and answers exactly as
-- the full path would then. In any other case it changes nothing and
-- returns nil, and the full path runs. It looks at the tail of ready and
-- the queue's settings first, so that a queue of keyed items or timers
-- hands over after one read, and a paused, limited or grouped one after
-- two.
local function take_plain()
  local conn, token, field = ARGV[1], ARGV[3], ARGV[4]
  local n, cap = tonumber(ARGV[2]), tonumber(ARGV[5])
  -- KEYS: the queue's block (see queue_at), the script's own key, then
  -- the caller's storage alone (unacked, replies, lost, done)
  if #KEYS ~= QLEN + 5 or n < 1 then
    return nil
  end
  local uk, rk = KEYS[QLEN + 2], KEYS[QLEN + 3]
  if string.sub(uk, -#conn - 9) ~= ':unacked:' .. conn then
    return nil
  end
  local ready, levels, delayed, leases = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
  -- the tail of ready first: a queue of keyed items or timers (whose
  -- stubs wait in ready) hands over at once
  local e = redis.call('LINDEX', ready, -1)
  if e and (string.byte(e, 1) ~= 1 or #e < IDLEN + 1) then
    return nil
  end
  local st = redis.call('HMGET', KEYS[6], 'paused', 'rate_n', 'rate_ms', 'groups')
  if st[1] or st[2] or st[3] or st[4] then
    return nil
  end
  if redis.call('HEXISTS', KEYS[7], conn) == 0 then
    return nil -- not registered: the full path refuses the call
  end
  local now = now_ms()
  local last = redis.call('HGET', rk, field)
  local lt = last and tonumber(string.match(last, '^(%d+)|'))
  if lt and lt >= tonumber(token) then
    return nil -- a resend, or a late send
  end
  -- the first lease to run out and the first delayed delivery: neither
  -- may be due, and the earlier is the hint when ready runs dry
  local hint = -1
  for _, k in ipairs({leases, delayed}) do
    local first = redis.call('ZRANGE', k, 0, 0, 'WITHSCORES')
    if #first > 0 then
      local at = tonumber(first[2])
      if at <= now then
        return nil
      end
      if hint < 0 or at - now < hint then
        hint = math.max(1, at - now)
      end
    end
  end
  if cap > 0 then
    local room = cap - redis.call('HLEN', uk)
    if room <= 0 then
      return nil
    end
    n = math.min(n, room)
  end
  if redis.call('ZCARD', levels) > 0 then
    return nil
  end
  local items = redis.call('RPOP', ready, n)
  if not items then
    return {0, hint, ''}
  end
  local ids, seen = {}, {}
  for i, e in ipairs(items) do
    local id = string.sub(e, 2, IDLEN + 1)
    if string.byte(e, 1) ~= 1 or #e < IDLEN + 1 or seen[id] then
      -- put them back as they were (RPOP answered the tail first)
      local back = {}
      for j = #items, 1, -1 do
        back[#back + 1] = items[j]
      end
      redis.call('RPUSH', ready, unpack(back))
      return nil
    end
    seen[id] = true
    ids[i] = id
  end
  local fence = tostring(redis.call('INCR', KEYS[8]))
  local kv, rec = {}, {}
  for i, e in ipairs(items) do
    kv[2 * i - 1] = ids[i] .. fence
    kv[2 * i] = e
    rec[2 * i - 1] = ids[i]
    rec[2 * i] = '-'
  end
  redis.call('HSET', uk, unpack(kv))
  redis.call('HSET', rk, field, token .. '|' .. fence .. '|' .. table.concat(rec))
  if #items >= n then
    hint = 0
  end
  items[#items + 1] = tonumber(fence)
  items[#items + 1] = hint
  items[#items + 1] = ''
  return items
end
local taken = take_plain()
if taken then
  return taken
end
-- redq: full path
local P, rl = queue_keys()
local conn, n, token, field = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
local cap = tonumber(ARGV[5])
local own = conn_keys(P, conn)
local uk, rk = own.uk, own.rk
if redis.call('HEXISTS', P.consumers, conn) == 0 then
  return redis.error_reply('LOST connection is not registered for this queue')
end
local now = now_ms()
local last = redis.call('HGET', rk, field)
local lt = last and tonumber(string.match(last, '^(%d+)|'))
if lt and lt > tonumber(token) then
  -- a late send of a call that is over: take nothing
  return {0, 0, ''}
end
if lt == tonumber(token) then
  -- The record is token|fence| and per take its id and 'k' (keyed), 'g'
  -- (grouped) or '-'.
  local fence, pos = string.match(last, '^(%d+)|()', #token + 2)
  local fields = {}
  for i = pos, #last, IDLEN + 1 do
    local f = string.sub(last, i, i + IDLEN - 1) .. fence
    local c = string.sub(last, i + IDLEN, i + IDLEN)
    if c ~= '-' then
      f = f .. c
    end
    fields[#fields + 1] = f
  end
  local out = {}
  for _, e in ipairs(redis.call('HMGET', uk, unpack(fields))) do
    if e then
      out[#out + 1] = e
    end
  end
  out[#out + 1] = tonumber(fence)
  out[#out + 1] = -4
  out[#out + 1] = ''
  return out
end
expire_leases(P, now, 100)
-- paused, rate_n, rate_ms, groups, gturn: one read whether or not a
-- limit is set or the queue has groups
local st = redis.call('HMGET', P.meta, 'paused', 'rate_n', 'rate_ms', 'groups', 'gturn')
if st[1] then
  promote(P, now, 100)
  return {0, -3, table.concat(P.need, ' ')}
end
if cap > 0 then
  local room = cap - redis.call('HLEN', uk)
  if room <= 0 then
    return {0, -2, table.concat(P.need, ' ')}
  end
  n = math.min(n, room)
end
local rate_n, rate_ms = tonumber(st[2]), tonumber(st[3])
local limited = false -- the limit, not the caller, set n
if rate_n and rate_ms and rate_n > 0 and rate_ms > 0 then
  redis.call('ZREMRANGEBYSCORE', rl, '-inf', now - rate_ms)
  local left = rate_n - redis.call('ZCARD', rl)
  if left <= 0 then
    promote(P, now, 100)
    local oldest = redis.call('ZRANGE', rl, 0, 0, 'WITHSCORES')
    return {0, -5 - math.max(1, tonumber(oldest[2]) + rate_ms - now), table.concat(P.need, ' ')}
  end
  if left <= n then
    n, limited = left, true
  end
else
  rate_ms = nil
end
promote(P, now, math.max(n, 100))
local items, more, gfrom
if not st[4] then
  items, more = pop_ready(P, n)
else
  -- a queue with groups: the ready lists and the groups' ring take turns
  -- (meta field gturn names whose turn is next: 'p' the ready lists, else
  -- the groups), half of the call's n each, and either side takes what
  -- the other leaves. Grouped deliveries are appended to items from
  -- gfrom on.
  P.grouped = true
  local G = grouped()
  local S = G.settings(P)
  G.promote(P, S, now, 100)
  local first = math.ceil(n / 2)
  local taken = {}
  local got
  local function pop(m)
    if m <= 0 then
      return {}
    end
    return (pop_ready(P, m))
  end
  if st[5] == 'p' then
    items = pop(first)
    got = G.take(P, S, n - #items, now, taken)
    if #items + got < n and #items == first then
      local rest = pop(n - #items - got)
      for _, e in ipairs(rest) do
        items[#items + 1] = e
      end
    end
  else
    got = G.take(P, S, first, now, taken)
    items = pop(n - got)
    if #items + got < n and got == first then
      got = got + G.take(P, S, n - #items - got, now, taken)
    end
  end
  redis.call('HSET', P.meta, 'gturn', st[5] == 'p' and 'g' or 'p')
  gfrom = #items + 1
  for _, e in ipairs(taken) do
    items[#items + 1] = e
  end
  more = #items >= n
end
-- Kept deliveries are compacted to the front of items (dropped ones are
-- rare), which then is the reply.
-- ids holds the record's parts: per take its id, then 'k' or '-' (two
-- entries, so that no string is made per take: see the record above).
local kv, ids, seen = {}, {}, {}
local lk = P.leases
local fence = nil
local k = 0
for i = 1, #items do
  local e = items[i]
  local key = nil
  local b = string.byte(e, 1)
  local gt = gfrom and i >= gfrom
  if e == MARKER then
    e = nil
  elseif not gt then
    if b == 5 and string.match(e, '^\5%d%d+:') then
      -- a keyed item's stub: take the item it stands for (nil: stale; a
      -- look-alike another program pushed comes back as it is, no key)
      e, key = keyed().take_stub(P, e)
    end
    if e and not key then
      if b == 4 and meta(e) then
        -- a keyed envelope in a ready list (copied there by hand): upserted
        -- by its key instead
        keyed().adopt(P, e, now)
        e = nil
      elseif b == 6 and meta(e) then
        -- a grouped envelope in a ready list (copied there by hand): it
        -- joins its group's line instead
        grouped().add_all(P, {e}, now)
        e = nil
      elseif #e < IDLEN + 1 or (b ~= 1 and b ~= 3) then
        -- pushed by another program without an envelope: wrap it
        e = '\1' .. string.format('~%015d', redis.call('INCR', P.seq)) .. e
      end
    end
  end
  if e then
    local m = nil
    if b ~= 1 then
      m = meta(e)
    end
    if m and m[5] > 0 and m[5] <= now and not gt then
      expire(P, e, now)
    else
      local id = string.sub(e, 2, IDLEN + 1)
      if seen[id] then
        -- the same envelope twice in one take (a list copied by hand): the
        -- repeat gets an id of its own so both keep a slot in the hash
        id = string.format('~%015d', redis.call('INCR', P.seq))
        e = string.sub(e, 1, 1) .. id .. string.sub(e, IDLEN + 2)
      end
      seen[id] = true
      fence = fence or tostring(redis.call('INCR', P.fence))
      local f = id .. fence
      if key then
        -- a keyed take: its field ends with 'k', and its key runs
        f = f .. 'k'
        redis.call('HSET', P.krun, key, f .. ':' .. conn)
        ids[#ids + 1] = id
        ids[#ids + 1] = 'k'
      elseif gt then
        -- a grouped take: its field ends with 'g' (its group's slot was
        -- counted by G.take)
        f = f .. 'g'
        ids[#ids + 1] = id
        ids[#ids + 1] = 'g'
      else
        ids[#ids + 1] = id
        ids[#ids + 1] = '-'
      end
      kv[#kv + 1] = f
      kv[#kv + 1] = e
      k = k + 1
      items[k] = e
      if m and m[3] > 0 then
        redis.call('ZADD', lk, now + m[3], lease_member(f, conn))
      end
    end
  end
end
for i = #items, k + 1, -1 do
  items[i] = nil
end
if #kv > 0 then
  redis.call('HSET', uk, unpack(kv))
  redis.call('HSET', rk, field, token .. '|' .. fence .. '|' .. table.concat(ids))
  if rate_ms then
    -- log the takes: kv holds field, envelope pairs; the log holds
    -- now, field pairs
    local log = {}
    for i = 1, #kv, 2 do
      log[#log + 1] = now
      log[#log + 1] = kv[i]
    end
    redis.call('ZADD', rl, unpack(log))
    redis.call('PEXPIRE', rl, rate_ms)
  end
end
local hint = 0
if limited and k == n then
  -- took what the limit allowed: the log is full
  local oldest = redis.call('ZRANGE', rl, 0, 0, 'WITHSCORES')
  hint = -5 - math.max(1, tonumber(oldest[2]) + rate_ms - now)
elseif not more and #P.need == 0 then
  -- (with leases to end that this call could not, the caller comes back
  -- at once, declaring their connections)
  hint = next_event(P, now)
end
items[k + 1] = tonumber(fence or 0)
items[k + 2] = hint
items[k + 3] = table.concat(P.need, ' ')
return items
