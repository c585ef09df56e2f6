-- Shared helpers: scripts.go puts in front of each queue script the
-- definitions below that it uses (see withHelpers).
--
-- A queue's keys all carry its hash tag (one cluster slot). A script
-- touches only the keys it is given in KEYS, in the layout of scriptKeys in
-- keys.go, and builds no key name itself: queue_keys reads them into the
-- table P (the queue) that the helpers take. A connection's storage is
-- there only for the connections the caller declared: a helper that meets
-- another one (a lease of another connection ran out) leaves what it holds
-- alone and names it in P.need, so that the caller comes back with its keys.
--
-- The wake marker is an element that is not a delivery. A script that puts
-- a delivery somewhere an idle consumer does not watch (a priority list, or
-- the delayed set ahead of everything there) pushes it into an empty ready
-- list, so that consumers blocked on ready wake up and fetch. It is only
-- ever pushed into an empty list, and every script that pushes to the tail
-- of ready drops it first, so there is at most one and it is always the
-- tail; fetches, drains and counts skip it.
local MARKER = '\0redq:wake'
local IDLEN = 16

-- Redis's clock in ms: the one clock that decides due times and leases.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- The metadata of a format-3 envelope as {attempts, priority, ttr, ttl,
-- expireAt, headerLen}, or of a keyed (format-4) or grouped (format-6) one
-- as the same followed by keyLen (the group's length) and due, and where
-- the rest starts; nil for other forms.
local function meta(e)
  local b = string.byte(e, 1)
  if b == 3 then
    local a, p, r, l, x, h, stop = string.match(e, '^(%d+),(%d+),(%d+),(%d+),(%d+),(%d+);()', IDLEN + 2)
    if a then
      return {tonumber(a), tonumber(p), tonumber(r), tonumber(l), tonumber(x), tonumber(h)}, stop
    end
  elseif b == 4 or b == 6 then
    local a, p, r, l, x, h, k, d, stop = string.match(e, '^(%d+),(%d+),(%d+),(%d+),(%d+),(%d+),(%d+),(%d+);()', IDLEN + 2)
    if a then
      return {tonumber(a), tonumber(p), tonumber(r), tonumber(l), tonumber(x), tonumber(h), tonumber(k), tonumber(d)}, stop
    end
  end
  return nil
end

-- meta, or the metadata of a plain envelope (all zero, payload after the id).
local function meta_of(e)
  local m, stop = meta(e)
  if m then
    return m, stop
  end
  return {0, 0, 0, 0, 0, 0}, IDLEN + 2
end

-- The envelope e rewritten with metadata m: as format 3, or as a keyed
-- envelope (format 4) when m has a key, or grouped (format 6) when e is.
local function with_meta(e, m, stop)
  local f = '\3'
  if #m == 8 then
    f = '\4'
    if string.byte(e, 1) == 6 then
      f = '\6'
    end
  end
  return f .. string.sub(e, 2, IDLEN + 1) .. table.concat(m, ',') .. ';' .. string.sub(e, stop)
end

-- The number of keys of a queue's block (queueBlockLen in keys.go): 15
-- keys, the ready lists of priorities 1..9, pub and the 6 group keys.
local QLEN = 31
local MAXP = 9

-- The queue whose block starts at KEYS[b].
local function queue_at(b)
  return {ready = KEYS[b], levels = KEYS[b + 1], delayed = KEYS[b + 2], leases = KEYS[b + 3],
    rejected = KEYS[b + 4], meta = KEYS[b + 5], consumers = KEYS[b + 6], fence = KEYS[b + 7],
    seq = KEYS[b + 8], kpend = KEYS[b + 9], krun = KEYS[b + 10], kpark = KEYS[b + 11],
    kver = KEYS[b + 12], outbox = KEYS[b + 13], moved = KEYS[b + 14], lv = b + 14, pub = KEYS[b + 24],
    gitems = KEYS[b + 25], gidx = KEYS[b + 26], gring = KEYS[b + 27], grun = KEYS[b + 28],
    gwait = KEYS[b + 29], glog = KEYS[b + 30], conns = {}, need = {}}
end

-- The keys of a queue script: the queue P with the storage of the
-- connections declared (P.conns, by name: {uk, rk, lost, done}), the
-- script's own key, and with dest the queue whose block ends KEYS.
local function queue_keys(dest)
  local P = queue_at(1)
  local last = #KEYS
  local D = nil
  if dest then
    last = last - QLEN
    D = queue_at(last + 1)
  end
  for i = QLEN + 2, last, 4 do
    -- the connection's name is what follows ':unacked:' (a prefix holds no
    -- such part: names hold no colon)
    P.conns[string.match(KEYS[i], ':unacked:(.*)$')] = {uk = KEYS[i], rk = KEYS[i + 1], lost = KEYS[i + 2], done = KEYS[i + 3]}
  end
  return P, KEYS[QLEN + 1], D
end

-- The storage of connection conn, which the caller must have declared.
local function conn_keys(P, conn)
  local c = P.conns[conn]
  if not c then
    error('redq: the storage of connection ' .. conn .. ' was not declared')
  end
  return c
end

-- The list holding ready deliveries of priority p (a number or its
-- digits), nil for a priority out of range.
local function ready_key(P, p)
  p = tonumber(p)
  if p == 0 then
    return P.ready
  end
  if p and p >= 1 and p <= MAXP and p == math.floor(p) then
    return KEYS[P.lv + p]
  end
  return nil
end

local function wake(P)
  local ready = P.ready
  if redis.call('LLEN', ready) == 0 then
    redis.call('LPUSH', ready, MARKER)
  end
end

local function drop_marker(ready)
  if redis.call('LINDEX', ready, -1) == MARKER then
    redis.call('RPOP', ready)
  end
end

-- Put envelopes of priority p into ready: at the back of the line, or at
-- the front (taken next) with front.
local function push_ready(P, p, items, front)
  if #items == 0 then
    return
  end
  local key = ready_key(P, p)
  if p == 0 and front then
    drop_marker(key)
  end
  for i = 1, #items, 1000 do
    local j = math.min(i + 999, #items)
    if front then
      redis.call('RPUSH', key, unpack(items, i, j))
    else
      redis.call('LPUSH', key, unpack(items, i, j))
    end
  end
  if p > 0 then
    redis.call('ZADD', P.levels, p, p)
    wake(P)
  end
end

-- Group envelopes by priority: {[p] = {e, ...}}.
local function add_level(groups, p, e)
  local g = groups[p]
  if not g then
    g = {}
    groups[p] = g
  end
  g[#g + 1] = e
end

local function push_groups(P, groups, front)
  for p, items in pairs(groups) do
    if p >= 0 then
      push_ready(P, p, items, front)
    end
  end
end

-- Counters of a queue, kept in its meta hash (see History in
-- inspector.go), by Redis's clock: a ring of HSLOTS one-minute slots, where
-- slot s holds the minute it counts in m<s> and that minute's counts in
-- <c><s>; lm, the last minute counted; and totals n<c> of the minutes
-- before lm. c is p (published), a (acked), r (rejected) or t (retried:
-- went back to ready after a take). The total of c is n<c> plus the <c>
-- count of lm's slot, so reading the totals costs two small reads (see
-- counts.lua). The first count in a later minute adds lm's counts to the
-- totals and starts that minute's slot over (once a minute at most); a
-- slot that comes round again was folded when it was lm, so the ring needs
-- no trimming and a count costs three calls (TIME, HGET, HINCRBY). A clock
-- that steps back counts into lm.
local HSLOTS = 64

local function tally(mk, c, n, now)
  if n <= 0 then
    return
  end
  local minute = math.floor(now / 60000)
  local lm = redis.call('HGET', mk, 'lm')
  if lm ~= tostring(minute) then
    lm = tonumber(lm)
    local totals = {0, 0, 0, 0}
    if lm == nil then
      -- no lm yet: counters kept before there was one fold every slot but
      -- this minute's into the totals, once
      local fields = {}
      for s = 0, HSLOTS - 1 do
        fields[#fields + 1] = 'm' .. s
        fields[#fields + 1] = 'p' .. s
        fields[#fields + 1] = 'a' .. s
        fields[#fields + 1] = 'r' .. s
        fields[#fields + 1] = 't' .. s
      end
      local ring = redis.call('HMGET', mk, unpack(fields))
      for i = 1, #ring, 5 do
        if ring[i] and ring[i] ~= tostring(minute) then
          for j = 1, 4 do
            totals[j] = totals[j] + tonumber(ring[i + j] or '0')
          end
        end
      end
    elseif minute < lm then
      minute = lm
    else
      local ls = lm % HSLOTS
      local old = redis.call('HMGET', mk, 'p' .. ls, 'a' .. ls, 'r' .. ls, 't' .. ls)
      for j = 1, 4 do
        totals[j] = tonumber(old[j] or '0')
      end
    end
    for j, k in ipairs({'np', 'na', 'nr', 'nt'}) do
      if totals[j] ~= 0 then
        redis.call('HINCRBY', mk, k, totals[j])
      end
    end
    if minute ~= lm then
      local s = minute % HSLOTS
      if lm == nil and redis.call('HGET', mk, 'm' .. s) == tostring(minute) then
        redis.call('HSET', mk, 'lm', minute)
      else
        redis.call('HSET', mk, 'm' .. s, minute, 'p' .. s, 0, 'a' .. s, 0, 'r' .. s, 0, 't' .. s, 0, 'lm', minute)
      end
    end
  end
  redis.call('HINCRBY', mk, c .. (minute % HSLOTS), n)
end

-- Fold the counts of plain publishes that went to Redis without Lua (see
-- fence.go) into the counters of meta mk. Such a publish cannot read the
-- ring, so it adds its payloads to the field of its minute, by the
-- publishing process's clock, in the small hash pk; a guarded publish
-- calls this right after its own tally, and so once a minute at least
-- while plain publishes come. A minute that is lm counts in lm's slot; an
-- older one whose slot still holds it counts in that slot and in the
-- totals (its slot was folded into them when lm moved on); one gone from
-- the ring counts in the totals alone. A minute ahead of lm (the process's
-- clock runs ahead of Redis's) stays in pk until lm reaches or passes it.
local function fold_fast(mk, pk)
  local f = redis.call('HGETALL', pk)
  if #f == 0 then
    return
  end
  local lm = tonumber(redis.call('HGET', mk, 'lm'))
  if lm == nil then
    return
  end
  local done = {}
  local total = 0
  for i = 1, #f, 2 do
    local m, n = tonumber(f[i]), tonumber(f[i + 1])
    if m and m <= lm then
      local s = m % HSLOTS
      if m == lm then
        redis.call('HINCRBY', mk, 'p' .. s, n)
      elseif redis.call('HGET', mk, 'm' .. s) == f[i] then
        redis.call('HINCRBY', mk, 'p' .. s, n)
        total = total + n
      else
        total = total + n
      end
      done[#done + 1] = f[i]
    elseif not m then
      done[#done + 1] = f[i]
    end
  end
  if total ~= 0 then
    redis.call('HINCRBY', mk, 'np', total)
  end
  if #done > 0 then
    redis.call('HDEL', pk, unpack(done))
  end
end

-- Count a delivery whose time to live ran out; keep it in rejected when the
-- queue is configured so, and count it as rejected then (see tally).
local function expire(P, e, now)
  local mk = P.meta
  redis.call('HINCRBY', mk, 'expired', 1)
  if redis.call('HGET', mk, 'keep_expired') == '1' then
    redis.call('LPUSH', P.rejected, e)
    tally(mk, 'r', 1, now)
  end
end

-- Schedule e to become ready at due; wake the consumers when it is now the
-- earliest, so that they wait for it rather than for what they knew.
local function schedule(P, e, due)
  local dk = P.delayed
  local first = redis.call('ZRANGE', dk, 0, 0, 'WITHSCORES')
  redis.call('ZADD', dk, due, e)
  if #first == 0 or tonumber(first[2]) > due then
    wake(P)
  end
end

-- Keyed items (see keyed.go). A key has at most one pending item and at
-- most one running delivery:
--
--   P:kpend  hash key -> record of the pending item; its stub waits in the
--            delayed set or a ready list
--   P:krun   hash key -> field:connection of the running take
--   P:kpark  hash key -> record of the successor parked while the key runs
--            (in no list: it is placed when the running delivery settles)
--   P:kver   counter: stub versions
--
-- A record is "ver,first,limit,updates,mode;" and the item's keyed envelope
-- (format 4, whose metadata ends with the key's length and the due time):
-- ver names the item's current stub, first is when its first upsert came
-- (Redis ms), limit the latest due time MaxWait allows (0: none), updates
-- how many upserts were merged into it, mode the OnExisting mode (A, P or K)
-- it was created with. The item keeps its delivery id while it is pending.
--
-- A stub stands for the item in the delayed set and the ready lists, so
-- that an upsert changes the item in place (one HSET) wherever it waits:
-- byte 5, the priority digit, the version, ':' and the key. A stub in the
-- delayed set can be moved exactly (ZADD, ZREM); one that already waits in
-- a ready list cannot (a list is not searchable), so when its item moves
-- it is left behind as stale (its version no longer matches) and counted
-- in meta's kstale, and whoever pops it drops it.
local keyed_lib = nil

-- The keyed helpers, as the fields of a table made on first use in a call:
-- a script runs its helpers' definitions on every call, and most calls of
-- the scripts that know keyed items (fetch, settle, release) never meet
-- one.
local function keyed()
  if keyed_lib then
    return keyed_lib
  end
  local K = {}
  -- Outcomes of an upsert (UpsertOutcome in keyed.go).
  K.CREATED, K.UPDATED, K.KEPT, K.QUEUED = 1, 2, 3, 4

  function K.parse_rec(r)
    local v, f, l, u, mode, pos = string.match(r, '^(%d+),(%d+),(%d+),(%d+),(%a);()')
    return {tonumber(v), tonumber(f), tonumber(l), tonumber(u), mode}, string.sub(r, pos)
  end

  function K.make_rec(s, e)
    return s[1] .. ',' .. s[2] .. ',' .. s[3] .. ',' .. s[4] .. ',' .. s[5] .. ';' .. e
  end

  function K.stub(p, ver, key)
    return '\5' .. p .. ver .. ':' .. key
  end

  -- The key of a keyed envelope.
  function K.key_of(e)
    local m, stop = meta(e)
    return string.sub(e, stop, stop + m[7] - 1)
  end

  -- Whether stale stubs are left in the ready lists (see kstale above).
  function K.stale_left(P)
    return tonumber(redis.call('HGET', P.meta, 'kstale') or '0') > 0
  end

  -- The envelope of the item a popped stub x stands for, and its key, after
  -- taking the item out of the pending records; nil when x is stale
  -- (counted off kstale). When x is neither (no stale stub is left), it is
  -- not a stub but an item another program pushed that looks like one, and
  -- x comes back as it is, with no key.
  function K.take_stub(P, x)
    local ver, pos = string.match(x, '^\5%d(%d+):()')
    local key = string.sub(x, pos)
    local kp = P.kpend
    local r = redis.call('HGET', kp, key)
    if r then
      local s, e = K.parse_rec(r)
      if s[1] == tonumber(ver) then
        redis.call('HDEL', kp, key)
        return e, key
      end
    end
    if not K.stale_left(P) then
      return x
    end
    redis.call('HINCRBY', P.meta, 'kstale', -1)
    return nil
  end

  -- Make the item with state s and envelope e the key's pending item: record
  -- it under a new stub version and put the stub where it waits (the delayed
  -- set until its due time, else the back of its priority's ready line, or
  -- the front with front). Its time to live counts from its due time or now,
  -- whichever is later.
  function K.place(P, key, s, e, now, front)
    local m, stop = meta(e)
    if m[4] > 0 then
      m[5] = math.max(m[8], now) + m[4]
    end
    s[1] = redis.call('INCR', P.kver)
    redis.call('HSET', P.kpend, key, K.make_rec(s, with_meta(e, m, stop)))
    local st = K.stub(m[2], s[1], key)
    if m[8] > now then
      schedule(P, st, m[8])
    else
      push_ready(P, m[2], {st}, front)
    end
  end

  -- The latest due time for an item of state s given an upsert's MaxWait
  -- (ms, 0: none): the earlier of what it allowed before and first + maxwait.
  function K.limit_of(s, maxwait)
    if maxwait > 0 and (s[3] == 0 or s[2] + maxwait < s[3]) then
      return s[2] + maxwait
    end
    return s[3]
  end

  -- The envelope new with the id and attempts of old and due time due.
  function K.merged(old, new, due)
    local om = meta(old)
    local e = string.sub(old, 1, IDLEN + 1) .. string.sub(new, IDLEN + 2)
    local m, stop = meta(e)
    m[1], m[8] = om[1], due
    return with_meta(e, m, stop)
  end

  -- Upsert keyed envelope e (its id is used when it creates an item) with
  -- OnExisting mode ('A' ReplaceAll, 'P' ReplacePayload, 'K' KeepExisting),
  -- due time due and MaxWait maxwait (ms, 0: none). Returns the outcome.
  function K.key_upsert(P, key, e, mode, due, maxwait, now)
    local kp, pk = P.kpend, P.kpark
    local r = redis.call('HGET', kp, key)
    local running = false
    if not r then
      r = redis.call('HGET', pk, key)
      running = r or redis.call('HEXISTS', P.krun, key) == 1
    end
    if not r then
      -- a new item: pending, or parked behind the running delivery
      local s = {0, now, 0, 0, mode}
      s[3] = K.limit_of(s, maxwait)
      if s[3] > 0 and due > s[3] then
        due = s[3]
      end
      local m, stop = meta(e)
      m[8] = due
      e = with_meta(e, m, stop)
      if running then
        redis.call('HSET', pk, key, K.make_rec(s, e))
        return K.QUEUED
      end
      K.place(P, key, s, e, now, false)
      return K.CREATED
    end
    local s, old = K.parse_rec(r)
    s[4] = s[4] + 1
    local om = meta(old)
    if mode == 'K' then
      redis.call('HSET', running and pk or kp, key, K.make_rec(s, old))
      return K.KEPT
    end
    if mode == 'P' then
      due = om[8]
    end
    s[3] = K.limit_of(s, maxwait)
    if s[3] > 0 and due > s[3] then
      due = s[3]
    end
    local ne = K.merged(old, e, due)
    if running then
      redis.call('HSET', pk, key, K.make_rec(s, ne))
      return K.QUEUED
    end
    local nm = meta(ne)
    local dk = P.delayed
    local ost = K.stub(om[2], s[1], key)
    local delayed = redis.call('ZSCORE', dk, ost)
    if nm[2] == om[2] and (delayed or due <= now) then
      if delayed and due > now then
        schedule(P, ost, due)
      elseif delayed then
        redis.call('ZREM', dk, ost)
        push_ready(P, nm[2], {ost}, false)
      end
      -- it stays under its stub; its time to live restarts
      local m, stop = meta(ne)
      if m[4] > 0 then
        m[5] = math.max(due, now) + m[4]
      end
      redis.call('HSET', kp, key, K.make_rec(s, with_meta(ne, m, stop)))
      return K.UPDATED
    end
    if delayed then
      redis.call('ZREM', dk, ost)
    else
      redis.call('HINCRBY', P.meta, 'kstale', 1)
    end
    K.place(P, key, s, ne, now, false)
    return K.UPDATED
  end

  -- Remove the pending item of key, or its parked successor; never a
  -- running delivery. Returns 1 when there was one, 0 when not.
  function K.cancel(P, key)
    local kp = P.kpend
    local r = redis.call('HGET', kp, key)
    if not r then
      return redis.call('HDEL', P.kpark, key)
    end
    local s, e = K.parse_rec(r)
    if redis.call('ZREM', P.delayed, K.stub(meta(e)[2], s[1], key)) == 0 then
      -- its stub waits in a ready list: left there, stale
      redis.call('HINCRBY', P.meta, 'kstale', 1)
    end
    redis.call('HDEL', kp, key)
    return 1
  end

  -- A keyed envelope that arrives from outside the key's records (returned
  -- from rejected, pushed from another queue) is upserted by its key,
  -- ReplaceAll and due now.
  function K.adopt(P, e, now)
    return K.key_upsert(P, K.key_of(e), e, 'A', now, 0, now)
  end

  -- The running delivery of key was settled for good (acked, rejected,
  -- pushed on): a parked successor becomes the pending item, due at its own
  -- due time or now, whichever is later.
  function K.key_settled(P, key, now)
    redis.call('HDEL', P.krun, key)
    local pk = P.kpark
    local r = redis.call('HGET', pk, key)
    if r then
      redis.call('HDEL', pk, key)
      local s, e = K.parse_rec(r)
      K.place(P, key, s, e, now, false)
    end
  end

  -- Ack the keyed takes named by fields (of the connection storage uk)
  -- together, as settle.lua would ack each (HDEL, then key_settled), in a
  -- few calls whatever their number: the hot path of timers, whose fires
  -- are acked in batches. Returns the set of fields that were held and
  -- are acked now (a field named twice counts once).
  function K.ack_takes(P, uk, fields)
    local es = redis.call('HMGET', uk, unpack(fields))
    local acked, found, keys, seen = {}, {}, {}, {}
    for i = 1, #fields do
      local f, e = fields[i], es[i]
      if e and not acked[f] then
        acked[f] = true
        found[#found + 1] = f
        local key = K.key_of(e)
        if not seen[key] then
          seen[key] = true
          keys[#keys + 1] = key
        end
      end
    end
    if #found == 0 then
      return acked
    end
    redis.call('HDEL', uk, unpack(found))
    redis.call('HDEL', P.krun, unpack(keys))
    local pk = P.kpark
    if redis.call('EXISTS', pk) == 1 then
      -- successors parked behind some of the keys become pending
      local rs = redis.call('HMGET', pk, unpack(keys))
      local now = nil
      for i = 1, #keys do
        local r = rs[i]
        if r then
          now = now or now_ms()
          redis.call('HDEL', pk, keys[i])
          local s, e = K.parse_rec(r)
          K.place(P, keys[i], s, e, now, false)
        end
      end
    end
    return acked
  end

  -- The running delivery e of key goes back to waiting (released, its lease
  -- lost, its connection dead, handed back by a stop), due at due: it is the
  -- key's pending item again, at the front of its line with front (then it
  -- keeps the due time it had, which has passed). A parked
  -- successor is merged into it, so that one run follows: with the
  -- successor's payload, headers and options (unless the successor keeps
  -- what exists: KeepExisting), the returned delivery's id and attempts, and
  -- the later of the two due times.
  function K.key_returned(P, key, e, now, due, front)
    redis.call('HDEL', P.krun, key)
    if front then
      -- handed back without a verdict: still due since when it was
      due = math.min(due, meta(e)[8])
    end
    local pk = P.kpark
    local r = redis.call('HGET', pk, key)
    local s = {0, now, 0, 0, 'A'}
    if r then
      redis.call('HDEL', pk, key)
      local pe
      s, pe = K.parse_rec(r)
      due = math.max(due, meta(pe)[8])
      if s[5] ~= 'K' then
        e = K.merged(e, pe, due)
      end
    end
    local m, stop = meta(e)
    m[8] = due
    K.place(P, key, s, with_meta(e, m, stop), now, front)
  end
  keyed_lib = K
  return K
end

-- Groups (see Group and WithGroupConcurrency). A grouped delivery (format
-- 6: a keyed envelope's layout with its group in place of the key) waits
-- in its group's line, not in a ready list:
--
--   P:gitems  hash group\0seq -> envelope; a group's line is numbered
--             head..tail-1 and handed out from head (a return goes to
--             head-1, so it is taken next)
--   P:gidx    hash group -> "head,tail,q" while the group has pending
--             deliveries; q is 1 while the group is in gring or gwait
--   P:gring   list: the ring of groups that may hand out now, each at most
--             once; fetch RPOPs one, hands out the head of its line and
--             LPUSHes it back while it may hand out again
--   P:grun    hash group -> its deliveries in flight (taken and not yet
--             settled or returned)
--   P:gwait   sorted set group -> Redis ms: when to look at the group
--             again (its rate allows the next hand-out, or its rate log
--             may go); fetch promotes due ones, and its hint counts them
--   P:glog    hash group -> rate log (see G.record)
--
-- A group is in gring or gwait (q = 1) exactly when it has pending
-- deliveries and fewer than K in flight, K being the queue's group
-- concurrency (meta field gk; 1 when unset). Every path keeps that: a
-- publish into a group that may hand out, and a settle or a return that
-- frees a slot of a group with pending deliveries, put it in (and wake
-- the consumers); a take that fills a group's slots or empties its line
-- leaves it out. The first grouped publish sets the meta field groups, so
-- that the fetches of a queue that never had a group skip all of this.
local group_lib = nil

-- The group helpers, as the fields of a table made on first use in a call
-- (as keyed()).
local function grouped()
  if group_lib then
    return group_lib
  end
  local G = {}
  -- the width of a time in a rate log
  local W = 13

  -- The queue's group settings: k (K), and with a rate, n per ms.
  function G.settings(P)
    local s = redis.call('HMGET', P.meta, 'gk', 'grate_n', 'grate_ms')
    local S = {k = math.max(1, tonumber(s[1]) or 1)}
    local n, ms = tonumber(s[2]), tonumber(s[3])
    if n and ms and n > 0 and ms > 0 then
      S.n, S.ms = n, ms
    end
    return S
  end

  -- The group of a grouped envelope.
  function G.group_of(e)
    local m, stop = meta(e)
    return string.sub(e, stop, stop + m[7] - 1)
  end

  -- The line of group g: head, tail, and whether it is in gring or gwait;
  -- nil when it has no pending delivery.
  function G.line(P, g)
    local v = redis.call('HGET', P.gidx, g)
    if not v then
      return nil
    end
    local h, t, q = string.match(v, '^(-?%d+),(-?%d+),(%d)$')
    return tonumber(h), tonumber(t), q == '1'
  end

  function G.set_line(P, g, h, t, q)
    if h >= t then
      redis.call('HDEL', P.gidx, g)
    else
      redis.call('HSET', P.gidx, g, h .. ',' .. t .. ',' .. (q and '1' or '0'))
    end
  end

  function G.running(P, g)
    return tonumber(redis.call('HGET', P.grun, g) or '0')
  end

  -- A group's rate log is "next;" and the times of its last hand-outs, W
  -- digits each: appended until there are n, then a ring where next is
  -- the slot of the oldest. A hand-out is allowed when the log holds
  -- fewer than n, or its oldest is a window old. A log of another length
  -- (n was changed) starts over.
  local function parse_log(log)
    local nx, pos = string.match(log, '^(%d+);()')
    return tonumber(nx), string.sub(log, pos)
  end

  -- When group g may hand out next by its rate (now when it may).
  function G.allowed_at(P, S, g, now)
    if not S.n then
      return now
    end
    local log = redis.call('HGET', P.glog, g)
    if not log then
      return now
    end
    local nx, body = parse_log(log)
    if #body ~= S.n * W then
      return now
    end
    local oldest = tonumber(string.sub(body, nx * W + 1, nx * W + W))
    return math.max(now, oldest + S.ms)
  end

  -- Log a hand-out of group g at now.
  function G.record(P, S, g, now)
    local t = string.format('%013d', now)
    local log = redis.call('HGET', P.glog, g)
    local nx, body = 0, ''
    if log then
      nx, body = parse_log(log)
    end
    local slots = #body / W
    if slots < S.n then
      body = body .. t
    elseif slots == S.n then
      body = string.sub(body, 1, nx * W) .. t .. string.sub(body, nx * W + W + 1)
      nx = (nx + 1) % S.n
    else
      nx, body = 0, t
    end
    redis.call('HSET', P.glog, g, nx .. ';' .. body)
  end

  -- The time of group g's latest hand-out in its log, or nil.
  local function newest(P, g)
    local log = redis.call('HGET', P.glog, g)
    if not log then
      return nil
    end
    local nx, body = parse_log(log)
    local slots = #body / W
    if slots == 0 then
      return nil
    end
    local i = slots - 1
    if nx > 0 then
      i = nx - 1
    end
    return tonumber(string.sub(body, i * W + 1, i * W + W))
  end

  -- Look at group g again at time at; wake the consumers when that is
  -- now the earliest such time (their wait may be longer).
  function G.later(P, g, at)
    local first = redis.call('ZRANGE', P.gwait, 0, 0, 'WITHSCORES')
    redis.call('ZADD', P.gwait, at, g)
    if #first == 0 or tonumber(first[2]) > at then
      wake(P)
    end
  end

  -- Put group g, which has pending deliveries and a free slot, into the
  -- ring, or into gwait until its rate allows; the caller marks it q.
  function G.enter(P, S, g, now)
    local at = G.allowed_at(P, S, g, now)
    if at <= now then
      if S.n then
        -- a wait for its log to go
        redis.call('ZREM', P.gwait, g)
      end
      redis.call('LPUSH', P.gring, g)
      wake(P)
    else
      G.later(P, g, at)
    end
  end

  -- Add grouped envelopes es (all of group g) to g's line: at the back in
  -- their order, or with front at the front (the last of es first).
  function G.add(P, S, g, es, now, front)
    local h, t, q = G.line(P, g)
    if not h then
      h, t, q = 0, 0, false
    end
    local kv = {}
    for _, e in ipairs(es) do
      if front then
        h = h - 1
        kv[#kv + 1] = g .. '\0' .. h
      else
        kv[#kv + 1] = g .. '\0' .. t
        t = t + 1
      end
      kv[#kv + 1] = e
      if #kv >= 2000 then
        redis.call('HSET', P.gitems, unpack(kv))
        kv = {}
      end
    end
    if #kv > 0 then
      redis.call('HSET', P.gitems, unpack(kv))
    end
    if not q and G.running(P, g) < S.k then
      G.enter(P, S, g, now)
      q = true
    end
    G.set_line(P, g, h, t, q)
  end

  -- Add grouped envelopes es (of any groups) at the back of their lines,
  -- in their order, and mark the queue as one that has groups.
  function G.add_all(P, es, now)
    redis.call('HSET', P.meta, 'groups', 1)
    local S = G.settings(P)
    local order, by = {}, {}
    for _, e in ipairs(es) do
      local g = G.group_of(e)
      if not by[g] then
        by[g] = {}
        order[#order + 1] = g
      end
      local l = by[g]
      l[#l + 1] = e
    end
    for _, g in ipairs(order) do
      G.add(P, S, g, by[g], now, false)
    end
  end

  -- One of group g's deliveries in flight is over: its slot is free.
  -- (Each path calls it once per take that leaves a connection's
  -- storage, right after the HDEL that proves it held the take; a count
  -- below zero would show a path that freed a slot twice, and is kept
  -- for the stats to show.)
  local function leave(P, g)
    local r = redis.call('HINCRBY', P.grun, g, -1)
    if r == 0 then
      redis.call('HDEL', P.grun, g)
    end
    return r
  end

  -- A taken grouped delivery e was settled for good (acked, rejected,
  -- pushed on): its group's slot is free, and the group goes back into the
  -- rotation when it has pending deliveries.
  function G.settled(P, e, now)
    local g = G.group_of(e)
    G.settled_line(P, g, now, leave(P, g))
  end

  -- A taken grouped delivery e goes back (released, its lease lost, its
  -- connection dead, handed back): to the front of its group's line, or,
  -- with due later than now, into the delayed set, from where it joins the
  -- back of the line when due. Its slot is free.
  function G.returned(P, e, now, due)
    local g = G.group_of(e)
    local run = leave(P, g)
    if due and due > now then
      schedule(P, e, due)
      G.settled_line(P, g, now, run)
      return
    end
    G.add(P, G.settings(P), g, {e}, now, true)
  end

  -- The rotation after group g's slot was freed (run: its deliveries in
  -- flight now, read when nil), for a group whose delivery did not come
  -- back into its line: a group with pending deliveries that was out of
  -- the rotation because it was full goes back in.
  function G.settled_line(P, g, now, run)
    local h, t, q = G.line(P, g)
    if h and not q then
      local S = G.settings(P)
      if (run or G.running(P, g)) < S.k then
        G.enter(P, S, g, now)
        G.set_line(P, g, h, t, true)
      end
    end
  end

  -- Move the groups of gwait that are due (at most max) on: into the ring
  -- when they may hand out, or their rate logs away when they have no
  -- pending delivery and their last hand-out left the window.
  function G.promote(P, S, now, max)
    local due = redis.call('ZRANGEBYSCORE', P.gwait, '-inf', now, 'LIMIT', 0, max)
    if #due == 0 then
      return
    end
    redis.call('ZREM', P.gwait, unpack(due))
    for _, g in ipairs(due) do
      local h, t, q = G.line(P, g)
      if h then
        if q then
          if G.running(P, g) >= S.k then
            G.set_line(P, g, h, t, false)
          else
            local at = G.allowed_at(P, S, g, now)
            if at <= now then
              redis.call('LPUSH', P.gring, g)
            else
              redis.call('ZADD', P.gwait, at, g)
            end
          end
        end
        -- (not q: the group is full, and a settle puts it back)
      else
        local last = S.n and newest(P, g)
        if last and last + S.ms > now then
          redis.call('ZADD', P.gwait, last + S.ms, g)
        else
          redis.call('HDEL', P.glog, g)
        end
      end
    end
  end

  -- Hand out up to n grouped deliveries, one per turn of a group in the
  -- ring, appending them to out. Returns how many.
  function G.take(P, S, n, now, out)
    local got = 0
    while got < n do
      local g = redis.call('RPOP', P.gring)
      if not g then
        break
      end
      local h, t = G.line(P, g)
      if h then
        local run = G.running(P, g)
        local at = now
        if run < S.k then
          at = G.allowed_at(P, S, g, now)
        end
        if run >= S.k then
          -- full (K was lowered meanwhile): a settle puts it back
          G.set_line(P, g, h, t, false)
        elseif at > now then
          redis.call('ZADD', P.gwait, at, g)
        else
          local e = nil
          while h < t and not e do
            local f = g .. '\0' .. h
            e = redis.call('HGET', P.gitems, f)
            redis.call('HDEL', P.gitems, f)
            h = h + 1
            if e then
              local m = meta(e)
              if m and m[5] > 0 and m[5] <= now then
                expire(P, e, now)
                e = nil
              end
            end
          end
          if e then
            run = redis.call('HINCRBY', P.grun, g, 1)
            if S.n then
              G.record(P, S, g, now)
            end
            out[#out + 1] = e
            got = got + 1
          end
          if h < t then
            if run < S.k then
              at = G.allowed_at(P, S, g, now)
              if at <= now then
                redis.call('LPUSH', P.gring, g)
              else
                redis.call('ZADD', P.gwait, at, g)
              end
              G.set_line(P, g, h, t, true)
            else
              G.set_line(P, g, h, t, false)
            end
          else
            redis.call('HDEL', P.gidx, g)
            if S.n then
              -- its log goes once its last hand-out left the window
              redis.call('ZADD', P.gwait, now + S.ms, g)
            end
          end
        end
      end
    end
    return got
  end

  -- Field f of group g's line (group\0seq) was just removed from gitems
  -- (the Inspector deleted that pending delivery): head and tail move past
  -- the fields no longer there, so that they stay on deliveries; a hole
  -- left in the middle of the line is skipped by the take that meets it.
  -- A line that empties leaves the ring (a group waiting in gwait stays
  -- there: promote finds no line and only looks after its rate log).
  function G.removed(P, g)
    local h, t, q = G.line(P, g)
    if not h then
      return
    end
    while h < t and redis.call('HEXISTS', P.gitems, g .. '\0' .. h) == 0 do
      h = h + 1
    end
    while t > h and redis.call('HEXISTS', P.gitems, g .. '\0' .. (t - 1)) == 0 do
      t = t - 1
    end
    if h >= t and q then
      redis.call('LREM', P.gring, 0, g)
    end
    G.set_line(P, g, h, t, q)
  end

  -- Remove up to n pending grouped deliveries (Drain), the head of each
  -- line first, appending them to out. Returns how many. A group whose
  -- line it empties leaves the ring too (as G.removed does), so that new
  -- work of the group later puts it there once.
  function G.drain(P, n, out)
    local got = 0
    local emptied = {}
    local cursor = '0'
    repeat
      local res = redis.call('HSCAN', P.gidx, cursor, 'COUNT', 100)
      cursor = res[1]
      local kv = res[2]
      for i = 1, #kv, 2 do
        if got >= n then
          break
        end
        local g = kv[i]
        local h, t, q = G.line(P, g)
        while h < t and got < n do
          local f = g .. '\0' .. h
          local e = redis.call('HGET', P.gitems, f)
          redis.call('HDEL', P.gitems, f)
          h = h + 1
          if e then
            out[#out + 1] = e
            got = got + 1
          end
        end
        if h >= t and q then
          emptied[#emptied + 1] = g
        end
        G.set_line(P, g, h, t, q)
      end
    until cursor == '0' or got >= n
    if #emptied > 0 then
      if redis.call('HLEN', P.gidx) == 0 then
        -- no group has a line left: the whole ring goes at once
        redis.call('DEL', P.gring)
      else
        for _, g in ipairs(emptied) do
          redis.call('LREM', P.gring, 0, g)
        end
      end
    end
    return got
  end
  group_lib = G
  return G
end

-- Whether the take named by field is of a grouped delivery: its field
-- ends with 'g' (see fetch.lua). When such a take leaves a connection's
-- storage, its group's slot is freed exactly once (see G.settled and
-- G.returned).
local function is_grouped_take(field)
  return string.byte(field, -1) == 103
end

-- Whether the take named by field is of a keyed item: its field ends with
-- 'k' (see fetch.lua). When such a take leaves a connection's storage, for
-- good (key_settled) or for ready again (key_returned), its key is updated.
local function is_keyed_take(field)
  return string.byte(field, -1) == 107
end

-- A plain envelope (format 1) with its first attempt counted: format 3,
-- priority 0 (the common case of again, kept cheap for the cleaner).
local function plain_again(e)
  return '\3' .. string.sub(e, 2, IDLEN + 1) .. '1,0,0,0,0,0;' .. string.sub(e, IDLEN + 2)
end

-- e taken once more goes back: count the attempt and restart its time to
-- live. Returns the new envelope and its priority.
local function again(e, now)
  if string.byte(e, 1) == 1 then
    return plain_again(e), 0
  end
  local m, stop = meta_of(e)
  m[1] = m[1] + 1
  if m[4] > 0 then
    m[5] = now + m[4]
  end
  return with_meta(e, m, stop), m[2]
end

-- Move due deliveries (at most max) from delayed to ready, at the back of
-- their priority's line; their time to live starts at their due time.
local function promote(P, now, max)
  local dk = P.delayed
  local due = redis.call('ZRANGEBYSCORE', dk, '-inf', now, 'WITHSCORES', 'LIMIT', 0, max)
  if #due == 0 then
    return 0
  end
  redis.call('ZREMRANGEBYRANK', dk, 0, #due / 2 - 1)
  local groups = {}
  for i = 1, #due, 2 do
    local e, at = due[i], tonumber(due[i + 1])
    local m, stop = meta(e)
    local p = 0
    if string.byte(e, 1) == 5 then
      -- a keyed item's stub (see stub): its TTL was set when it was placed
      p = string.byte(e, 2) - 48
    elseif m then
      p = m[2]
      if m[4] > 0 then
        m[5] = at + m[4]
        e = with_meta(e, m, stop)
      end
    end
    if m and m[5] > 0 and m[5] <= now then
      expire(P, e, now)
    elseif string.byte(e, 1) == 6 and m then
      -- a grouped delivery joins the back of its group's line (kept
      -- apart in groups[-1], which push_groups skips)
      add_level(groups, -1, e)
    else
      add_level(groups, p, e)
    end
  end
  push_groups(P, groups, false)
  if groups[-1] then
    grouped().add_all(P, groups[-1], now)
  end
  return #due / 2
end

-- A take of a delivery is named by its field in the connection's unacked
-- hash: the delivery's id followed by the fence of the fetch call that took
-- it (a number from the queue's fence counter, new for every fetch). A
-- later take of the same delivery, by this connection or another, has
-- another field, so a verb of an old holder can never act on it: the verbs
-- name the field, and an ack stays one HDEL. A take's lease is the member
-- field:connection of the leases set.
local function lease_member(field, conn)
  return field .. ':' .. conn
end

-- A delivery that went back to ready while its connection still held it
-- (its lease ran out) leaves a note in the connection's lost set, named by
-- the take's field, so that the holder's late verb learns why it is gone.
-- Notes are scored by Redis time and dropped after a day (the holder of a
-- lost lease may never come back: it hung, or the delivery ran out in its
-- prefetch buffer); a cleaner deletes the set with the connection's other
-- storage.
local LOST_KEEP = 86400000

-- Returns 2 (lease lost) when there is a note for the take, else 0 (not
-- there). Notes stay until they age out, so every stale verb learns it.
local function lost(P, conn, field)
  if redis.call('ZSCORE', conn_keys(P, conn).lost, field) then
    return 2
  end
  return 0
end

-- The envelope of the take named by field if conn holds it, and the code
-- to answer: 1 held, 0 not there, 2 not there because its lease ran out.
local function held(P, conn, field)
  local e = redis.call('HGET', conn_keys(P, conn).uk, field)
  if not e then
    return nil, lost(P, conn, field)
  end
  return e, 1
end

-- How long the records that answer a repeated call stay after the call (a
-- verb's receipt, a publish's record) or after a cleaner declared their
-- connection dead (its replies hash): longer than any client keeps sending
-- a call again (see WithRetryTimeout).
local REPLY_KEEP = 3600000

-- For the verbs on one delivery (release, reject with a reason): remove
-- the take that field names from conn's storage and end its lease.
-- Returns its envelope, or nil and the reply {registered, code} to give.
--
-- Each call carries a token of its own and leaves a receipt, field|token,
-- in a sorted set per connection by Redis time: when the reply is lost and
-- go-redis or redq sends the same call again, the repeat finds the receipt
-- and answers done, before it looks at anything else (a cleaner may have
-- declared the connection dead meanwhile; it leaves the receipts to
-- expire). A second call with another token finds no receipt and answers
-- not there. Receipts are dropped after REPLY_KEEP.
-- receipt_found tells whether receipt m is in receipt set rk: the call
-- that left it ran already. leave_receipt adds it, by Redis time, and
-- drops the receipts older than REPLY_KEEP.
local function receipt_found(rk, m)
  return redis.call('ZSCORE', rk, m) ~= false
end

local function leave_receipt(rk, m, now)
  redis.call('ZADD', rk, now, m)
  redis.call('ZREMRANGEBYSCORE', rk, '-inf', now - REPLY_KEEP)
  redis.call('PEXPIRE', rk, REPLY_KEEP)
end

local function remove_held(P, conn, field, token)
  local c = conn_keys(P, conn)
  local rk = c.done
  if receipt_found(rk, field .. '|' .. token) then
    return nil, {1, 1}
  end
  if redis.call('HEXISTS', P.consumers, conn) == 0 then
    return nil, {0, 0}
  end
  local e, code = held(P, conn, field)
  if not e then
    return nil, {1, code}
  end
  redis.call('HDEL', c.uk, field)
  redis.call('ZREM', P.leases, lease_member(field, conn))
  leave_receipt(rk, field .. '|' .. token, now_ms())
  return e
end

-- For the calls that answer with a number and run once per token (upsert,
-- cancel, run now): the outcome remembered in record rec (a string
-- "token:outcome") when this call ran already, -1 for a late send of an
-- older call of the slot, nil when it is to run. remember stores it.
local function recalled(rec, token)
  local last = redis.call('GET', rec)
  local lt, out = string.match(last or '', '^(%d+):(-?%d+)$')
  if lt then
    if tonumber(lt) == tonumber(token) then
      return tonumber(out)
    elseif tonumber(lt) > tonumber(token) then
      return -1
    end
  end
  return nil
end

local function remember(rec, token, out)
  redis.call('SET', rec, token .. ':' .. out, 'PX', REPLY_KEEP)
end

-- For the calls that settle takes (settle.lua, ack.lua), whose record in
-- field of the replies hash is "token|r1...rn": the answer, {1, r1, ...,
-- rn}, when this call ran already; {1, 0, ...} (n zeros) for a late send
-- of an older call under field, which does nothing; nil when it is to run.
local function settled_before(rk, field, token, n)
  local last = redis.call('HGET', rk, field)
  if not last then
    return nil
  end
  local t, lt = tonumber(token), tonumber(string.match(last, '^(%d+)|'))
  local out = {1}
  if lt == t then
    for i = #token + 2, #last do
      out[#out + 1] = tonumber(string.sub(last, i, i))
    end
    return out
  elseif lt > t then
    -- a late send of a call that is over (see remembered in retry.go)
    for i = 1, n do
      out[i + 1] = 0
    end
    return out
  end
  return nil
end

-- Ack n takes of one connection and queue none of which is keyed (the
-- body of ack.lua, and of each group of ack_many.lua): delete them from
-- the connection's unacked hash and end their leases. KEYS[kb+1..kb+7]
-- are ackKeys' (consumers, leases, the connection's unacked, replies, lost
-- and done, meta); ARGV[ab+1..ab+3] the connection's name, the field of
-- the replies hash and the token, ARGV[ab+4..ab+3+n] the takes. Returns
-- {registered, r1, ..., rn} and records it under the field, so that the
-- call sent again answers the same and a late send of a call that is
-- over does nothing (see settled_before).
local function ack_plain(kb, ab, n)
  local conn, field, token = ARGV[ab + 1], ARGV[ab + 2], ARGV[ab + 3]
  local ck, lk, uk, rk = KEYS[kb + 1], KEYS[kb + 2], KEYS[kb + 3], KEYS[kb + 4]
  local before = settled_before(rk, field, token, n)
  if before then
    return before
  end
  local out, flags, members = {1}, {}, {}
  local acked, registered = 0, nil
  for i = 1, n do
    local f = ARGV[ab + 3 + i]
    local code = redis.call('HDEL', uk, f)
    if code == 1 then
      acked = acked + 1
      members[acked] = f
    else
      -- A cleaner unregisters a connection only once it emptied its
      -- storage, so a take found there means registered: the consumers
      -- hash is looked at only for a take that is not.
      if registered == nil then
        registered = redis.call('HEXISTS', ck, conn) == 1
      end
      if not registered and acked == 0 then
        -- A cleaner emptied this connection's storage and unregistered
        -- it: there is nothing to settle, and nothing to remember.
        for j = 1, n do
          out[j + 1] = 0
        end
        out[1] = 0
        return out
      end
      if redis.call('ZSCORE', KEYS[kb + 5], f) then
        -- its lease ran out and it went back to ready (see expire_leases)
        code = 2
      end
    end
    out[i + 1] = code
    flags[i] = code
  end
  if acked > 0 then
    if redis.call('EXISTS', lk) == 1 then
      for i, f in ipairs(members) do
        members[i] = lease_member(f, conn)
      end
      redis.call('ZREM', lk, unpack(members))
    end
    -- acks count in the queue's counters (see tally)
    tally(KEYS[kb + 7], 'a', acked, now_ms())
  end
  redis.call('HSET', rk, field, token .. '|' .. table.concat(flags))
  return out
end

-- Return deliveries whose lease ran out (at most max) to the front of
-- ready, with their attempt counted, in a few calls per connection.
-- Leases of connections whose storage was not declared stay as they are,
-- and those connections are named in P.need. Returns how many leases it
-- ended.
local function expire_leases(P, now, max)
  local lk = P.leases
  local gone = redis.call('ZRANGEBYSCORE', lk, '-inf', now, 'LIMIT', 0, max)
  if #gone == 0 then
    return 0
  end
  local byConn, conns, ended = {}, {}, {}
  for _, member in ipairs(gone) do
    -- field:connection; the field's id may hold any byte, its fence digits
    local colon = string.find(member, ':', IDLEN + 1, true)
    local conn = string.sub(member, colon + 1)
    if P.conns[conn] then
      if not byConn[conn] then
        byConn[conn] = {}
        conns[#conns + 1] = conn
      end
      local fields = byConn[conn]
      fields[#fields + 1] = string.sub(member, 1, colon - 1)
      ended[#ended + 1] = member
    elseif not P.need[conn] then
      P.need[conn] = true
      P.need[#P.need + 1] = conn
    end
  end
  if #ended == #gone then
    redis.call('ZREMRANGEBYRANK', lk, 0, #gone - 1)
  elseif #ended > 0 then
    redis.call('ZREM', lk, unpack(ended))
  end
  local groups = {}
  for _, conn in ipairs(conns) do
    local fields = byConn[conn]
    local uk = P.conns[conn].uk
    local es = redis.call('HMGET', uk, unpack(fields))
    local found, notes = {}, {}
    for i, e in ipairs(es) do
      if e then
        local p
        e, p = again(e, now)
        if is_keyed_take(fields[i]) then
          keyed().key_returned(P, keyed().key_of(e), e, now, now, true)
        elseif is_grouped_take(fields[i]) then
          grouped().returned(P, e, now)
        else
          add_level(groups, p, e)
        end
        found[#found + 1] = fields[i]
        notes[#notes + 1] = now
        notes[#notes + 1] = fields[i]
      end
    end
    if #found > 0 then
      tally(P.meta, 't', #found, now)
      local nk = P.conns[conn].lost
      redis.call('HDEL', uk, unpack(found))
      redis.call('ZADD', nk, unpack(notes))
      redis.call('ZREMRANGEBYSCORE', nk, '-inf', now - LOST_KEEP)
      redis.call('PEXPIRE', nk, LOST_KEEP)
    end
  end
  push_groups(P, groups, true)
  return #ended
end

-- Restart the time to live of e, which goes back to ready without having
-- been handled (handed back by a stopping consumer, or pushed on). Returns
-- the envelope and its priority.
local function fresh_ttl(e, now)
  local m, stop = meta(e)
  if not m then
    return e, 0
  end
  if m[4] > 0 then
    m[5] = now + m[4]
    e = with_meta(e, m, stop)
  end
  return e, m[2]
end

-- Drop deliveries whose time to live ran out from the front of each ready
-- line (at most max in all): a queue nobody consumes counts them as expired
-- too. Deliveries behind one that has not expired wait for a consumer.
local function drop_expired(P, now, max)
  local dropped = 0
  local lists = {P.ready}
  for _, p in ipairs(redis.call('ZRANGE', P.levels, 0, -1)) do
    lists[#lists + 1] = ready_key(P, p) or P.ready
  end
  for _, key in ipairs(lists) do
    while dropped < max do
      local e = redis.call('LINDEX', key, -1)
      if not e then
        break
      end
      if e == MARKER then
        -- nobody is blocked on an idle queue's marker (it would have woken
        -- them); the consumers that woke fetch anyway
        redis.call('RPOP', key)
      elseif string.byte(e, 1) == 5 and string.match(e, '^\5%d%d+:') then
        -- a keyed item's stub: dropped when stale, with its item when that
        -- expired; a look-alike another program pushed never expires
        local ver, k = string.match(e, '^\5%d(%d+):(.*)$')
        local r = redis.call('HGET', P.kpend, k)
        local live = false
        if r then
          local s, ke = keyed().parse_rec(r)
          if s[1] == tonumber(ver) then
            local m = meta(ke)
            if not (m[5] > 0 and m[5] <= now) then
              break
            end
            live = true
          end
        end
        if not live and not keyed().stale_left(P) then
          break
        end
        redis.call('RPOP', key)
        local item = keyed().take_stub(P, e)
        if item then
          expire(P, item, now)
          dropped = dropped + 1
        end
      else
        local m = meta(e)
        if not (m and m[5] > 0 and m[5] <= now) then
          break
        end
        redis.call('RPOP', key)
        expire(P, e, now)
        dropped = dropped + 1
      end
    end
  end
  return dropped
end

-- How long until the next delivery is due or the next lease runs out (or,
-- on a queue with groups, the next group is to be looked at again: see
-- G.promote), in ms (at least 1), or -1 when nothing is scheduled.
local function next_event(P, now)
  local best = -1
  local keys = {P.delayed, P.leases}
  if P.grouped then
    keys[3] = P.gwait
  end
  for _, k in ipairs(keys) do
    local first = redis.call('ZRANGE', k, 0, 0, 'WITHSCORES')
    if #first > 0 then
      local d = math.max(1, tonumber(first[2]) - now)
      if best < 0 or d < best then
        best = d
      end
    end
  end
  return best
end

-- Pop up to n elements from the ready lists, highest priority first. Returns
-- them and whether n were popped (there may be more).
local function pop_ready(P, n)
  local lv = P.levels
  local levels = redis.call('ZREVRANGE', lv, 0, -1)
  if #levels == 0 then
    -- no priorities in use: the list's own reply (no copy)
    local got = redis.call('RPOP', P.ready, n)
    if not got then
      return {}, false
    end
    return got, #got >= n
  end
  local out = {}
  for _, p in ipairs(levels) do
    local want = n - #out
    local key = ready_key(P, p)
    local got = key and redis.call('RPOP', key, want)
    if got then
      for _, e in ipairs(got) do
        out[#out + 1] = e
      end
    end
    if not got or #got < want then
      redis.call('ZREM', lv, p)
    end
    if #out >= n then
      return out, true
    end
  end
  local got = redis.call('RPOP', P.ready, n - #out)
  if got then
    for _, e in ipairs(got) do
      out[#out + 1] = e
    end
  end
  return out, #out >= n
end

-- End of the shared helpers.
