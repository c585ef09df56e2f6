-- Shared helpers: scripts.go puts this file in front of every script.
--
-- A queue's keys all start with its prefix P = ns:{name} (one hash tag, so
-- one cluster slot). Scripts get P as an argument and derive the keys that
-- depend on data (priority levels, other connections' storage) from it.
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
-- expireAt, headerLen} and where the rest starts; nil for other forms.
local function meta(e)
  if string.byte(e, 1) ~= 3 then
    return nil
  end
  local a, p, r, l, x, h, stop = string.match(e, '^(%d+),(%d+),(%d+),(%d+),(%d+),(%d+);()', IDLEN + 2)
  if not a then
    return nil
  end
  return {tonumber(a), tonumber(p), tonumber(r), tonumber(l), tonumber(x), tonumber(h)}, stop
end

-- meta, or the metadata of a plain envelope (all zero, payload after the id).
local function meta_of(e)
  local m, stop = meta(e)
  if m then
    return m, stop
  end
  return {0, 0, 0, 0, 0, 0}, IDLEN + 2
end

-- The envelope e rewritten (as format 3) with metadata m.
local function with_meta(e, m, stop)
  return '\3' .. string.sub(e, 2, IDLEN + 1) .. table.concat(m, ',') .. ';' .. string.sub(e, stop)
end

-- The list holding ready deliveries of priority p.
local function ready_key(P, p)
  if p == 0 then
    return P .. ':ready'
  end
  return P .. ':ready:' .. p
end

local function wake(P)
  local ready = P .. ':ready'
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
    redis.call('ZADD', P .. ':levels', p, p)
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
    push_ready(P, p, items, front)
  end
end

-- Count a delivery whose time to live ran out; keep it in rejected when the
-- queue is configured so.
local function expire(P, e)
  local mk = P .. ':meta'
  redis.call('HINCRBY', mk, 'expired', 1)
  if redis.call('HGET', mk, 'keep_expired') == '1' then
    redis.call('LPUSH', P .. ':rejected', e)
  end
end

-- Schedule e to become ready at due; wake the consumers when it is now the
-- earliest, so that they wait for it rather than for what they knew.
local function schedule(P, e, due)
  local dk = P .. ':delayed'
  local first = redis.call('ZRANGE', dk, 0, 0, 'WITHSCORES')
  redis.call('ZADD', dk, due, e)
  if #first == 0 or tonumber(first[2]) > due then
    wake(P)
  end
end

-- e taken once more goes back: count the attempt and restart its time to
-- live. Returns the new envelope, its priority and the attempts counted
-- before.
local function again(e, now)
  if string.byte(e, 1) == 1 then
    -- plain (the common case, kept cheap for the cleaner): first attempt counted
    return '\3' .. string.sub(e, 2, IDLEN + 1) .. '1,0,0,0,0,0;' .. string.sub(e, IDLEN + 2), 0, 0
  end
  local m, stop = meta_of(e)
  local before = m[1]
  m[1] = before + 1
  if m[4] > 0 then
    m[5] = now + m[4]
  end
  return with_meta(e, m, stop), m[2], before
end

-- Move due deliveries (at most max) from delayed to ready, at the back of
-- their priority's line; their time to live starts at their due time.
local function promote(P, now, max)
  local dk = P .. ':delayed'
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
    if m then
      p = m[2]
      if m[4] > 0 then
        m[5] = at + m[4]
        e = with_meta(e, m, stop)
      end
    end
    if m and m[5] > 0 and m[5] <= now then
      expire(P, e)
    else
      add_level(groups, p, e)
    end
  end
  push_groups(P, groups, false)
  return #due / 2
end

-- A delivery that went back to ready while its connection still held it
-- (its lease ran out) leaves a note in the connection's lost set, named by
-- the delivery's ref (see held), so that the holder's late verb learns why
-- it is gone. Notes are scored by Redis time and dropped after a day (the
-- holder of a lost lease may never come back: it hung, or the delivery ran
-- out in its prefetch buffer); a cleaner deletes the set with the
-- connection's other storage.
local LOST_KEEP = 86400000

-- Returns 2 (lease lost) when there is a note for ref, else 0 (not there).
-- Notes stay until they age out, so every stale verb learns it.
local function lost(P, conn, ref)
  if #ref > IDLEN and redis.call('ZSCORE', P .. ':lost:' .. conn, ref) then
    return 2
  end
  return 0
end

-- A verb names a delivery by its ref: its id, or id@attempts, the attempt it
-- was taken at (always for the verbs on one delivery, and for settles of a
-- delivery with a lease). The same connection may hold the delivery again
-- under a later attempt: after its lease ran out, or after an earlier try
-- of this very verb went through but its reply was lost. The old holder's
-- verb must not act on the new take. Returns the id, the envelope if this
-- connection holds that attempt, and the code when it does not: 0 not
-- there, 2 its lease ran out (a note says so), 3 held under a later attempt
-- (without a note: an earlier try of the verb moved it, so the caller may
-- count the verb done when it retried).
local function held(P, uk, conn, ref)
  local id, want = ref, nil
  if #ref > IDLEN then
    id, want = string.sub(ref, 1, IDLEN), tonumber(string.sub(ref, IDLEN + 2))
  end
  local e = redis.call('HGET', uk, id)
  if not e then
    return id, nil, lost(P, conn, ref)
  end
  if want and meta_of(e)[1] ~= want then
    if lost(P, conn, ref) == 2 then
      return id, nil, 2
    end
    return id, nil, 3
  end
  return id, e, 1
end

-- For the verbs on one delivery (release, reject with a reason): remove
-- the delivery that ref names from conn's storage and end its lease.
-- Returns its envelope, or nil and the reply {registered, code} to give.
--
-- These verbs have no reply token (as settle has), so each leaves a
-- receipt: when its reply is lost and go-redis or the caller sends it
-- again, the repeat finds the receipt and answers done instead of "not
-- there". Receipts live in a sorted set per connection, by Redis time, and
-- are dropped after ten minutes; a cleaner deletes the set with the
-- connection's other storage.
local RECEIPT_KEEP = 600000

local function remove_held(P, conn, ref)
  if redis.call('HEXISTS', P .. ':consumers', conn) == 0 then
    return nil, {0, 0}
  end
  local uk, rk = P .. ':unacked:' .. conn, P .. ':done:' .. conn
  local id, e, code = held(P, uk, conn, ref)
  if not e then
    if redis.call('ZSCORE', rk, ref) then
      return nil, {1, 1}
    end
    return nil, {1, code}
  end
  redis.call('HDEL', uk, id)
  redis.call('ZREM', P .. ':leases', id .. conn)
  local now = now_ms()
  redis.call('ZADD', rk, now, ref)
  redis.call('ZREMRANGEBYSCORE', rk, '-inf', now - RECEIPT_KEEP)
  redis.call('PEXPIRE', rk, RECEIPT_KEEP)
  return e
end

-- Return deliveries whose lease ran out (at most max) to the front of
-- ready, with their attempt counted, in a few calls per connection.
local function expire_leases(P, now, max)
  local lk = P .. ':leases'
  local gone = redis.call('ZRANGEBYSCORE', lk, '-inf', now, 'LIMIT', 0, max)
  if #gone == 0 then
    return 0
  end
  redis.call('ZREMRANGEBYRANK', lk, 0, #gone - 1)
  local byConn, conns = {}, {}
  for _, member in ipairs(gone) do
    local conn = string.sub(member, IDLEN + 1)
    if not byConn[conn] then
      byConn[conn] = {}
      conns[#conns + 1] = conn
    end
    local ids = byConn[conn]
    ids[#ids + 1] = string.sub(member, 1, IDLEN)
  end
  local groups = {}
  for _, conn in ipairs(conns) do
    local ids = byConn[conn]
    local uk = P .. ':unacked:' .. conn
    local es = redis.call('HMGET', uk, unpack(ids))
    local found, notes = {}, {}
    for i, e in ipairs(es) do
      if e then
        local p, before
        e, p, before = again(e, now)
        add_level(groups, p, e)
        found[#found + 1] = ids[i]
        notes[#notes + 1] = now
        notes[#notes + 1] = ids[i] .. '@' .. before
      end
    end
    if #found > 0 then
      local nk = P .. ':lost:' .. conn
      redis.call('HDEL', uk, unpack(found))
      redis.call('ZADD', nk, unpack(notes))
      redis.call('ZREMRANGEBYSCORE', nk, '-inf', now - LOST_KEEP)
      redis.call('PEXPIRE', nk, LOST_KEEP)
    end
  end
  push_groups(P, groups, true)
  return #gone
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
  local lists = {P .. ':ready'}
  for _, p in ipairs(redis.call('ZRANGE', P .. ':levels', 0, -1)) do
    lists[#lists + 1] = P .. ':ready:' .. p
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
      else
        local m = meta(e)
        if not (m and m[5] > 0 and m[5] <= now) then
          break
        end
        redis.call('RPOP', key)
        expire(P, e)
        dropped = dropped + 1
      end
    end
  end
  return dropped
end

-- How long until the next delivery is due or the next lease runs out, in
-- ms (at least 1), or -1 when nothing is scheduled.
local function next_event(P, now)
  local best = -1
  for _, k in ipairs({P .. ':delayed', P .. ':leases'}) do
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
  local lv = P .. ':levels'
  local levels = redis.call('ZREVRANGE', lv, 0, -1)
  if #levels == 0 then
    -- no priorities in use: the list's own reply (no copy)
    local got = redis.call('RPOP', P .. ':ready', n)
    if not got then
      return {}, false
    end
    return got, #got >= n
  end
  local out = {}
  for _, p in ipairs(levels) do
    local want = n - #out
    local got = redis.call('RPOP', P .. ':ready:' .. p, want)
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
  local got = redis.call('RPOP', P .. ':ready', n - #out)
  if got then
    for _, e in ipairs(got) do
      out[#out + 1] = e
    end
  end
  return out, #out >= n
end

-- End of the shared helpers.
