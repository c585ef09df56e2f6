-- Move one chunk of an rmq v5 list into redq's layout (see migrate.go): take
-- up to ARGV[2] items (and about BUDGET bytes) off the rmq list KEYS[1],
-- wrap each in a delivery envelope and push them into the redq list
-- KEYS[2], in one atomic step.
--
-- ARGV[3] is the mode:
--   back   an rmq ready or rejected list (LPUSHed, oldest at the right):
--          the oldest items are taken and go to the back of KEYS[2] (LPUSH),
--          oldest first, so that the order is kept across chunks and the
--          items line up behind what KEYS[2] holds.
--   front  a dead rmq connection's unacked list (RPOPLPUSHed into, the take
--          of longest ago at the right): the newest takes are taken first
--          and go to the front of redq's ready (RPUSH, taken next), so that
--          across chunks the oldest take ends up first in line, as redq's
--          cleaner returns a dead connection's deliveries; each has its
--          attempt counted.
--
-- KEYS[3] is the queue's migration record, a hash: seq numbers the ids it
-- made, last holds the token and reply of the last call that moved
-- something, and ready, rejected and unacked count what moved over all
-- runs. A call sent again with the same token (go-redis resends a command
-- after a lost reply) answers the first call's reply and moves nothing.
--
-- KEYS[4], when given, is the rmq connection's heartbeat: while it exists
-- the connection is alive and nothing moves.
--
-- Every check that can fail comes before the first write: Redis keeps what
-- a failing script wrote, and an item taken off KEYS[1] and not pushed
-- would be lost.
--
-- Each item becomes an envelope (envelope.go) with an id of 6 bytes of
-- Redis's clock in ms, the 6 bytes of ARGV[4] (random per queue and run)
-- and 4 bytes of the record's seq: format 1 with the item as payload, or
-- format 3 when the item starts with rmq's header signature and a header
-- line that Go's encoding/json reads as an http.Header (the header goes into
-- the envelope and the rest of the item is the payload). An item whose
-- header line cannot be read is kept whole as the payload, and counted.
--
-- KEYS[1] rmq list, KEYS[2] redq list, KEYS[3] record, KEYS[4] heartbeat
-- (optional)
-- ARGV[1] token, ARGV[2] max items, ARGV[3] mode (back or front), ARGV[4]
-- 6 id bytes, ARGV[5] the record's total to count the items in
-- Returns {moved, with a header, header unreadable, 1 if the heartbeat
-- exists else 0}.
local src, dst, rec = KEYS[1], KEYS[2], KEYS[3]
local token, n, front = ARGV[1], tonumber(ARGV[2]), ARGV[3] == 'front'

local last = redis.call('HGET', rec, 'last')
if last then
  local t, a, b, c = string.match(last, '^(.*) (%d+) (%d+) (%d+)$')
  if t == token then
    return {tonumber(a), tonumber(b), tonumber(c), 0}
  end
end
if KEYS[4] and redis.call('EXISTS', KEYS[4]) == 1 then
  return {0, 0, 0, 1}
end
local dt = redis.call('TYPE', dst)
if type(dt) == 'table' then
  dt = dt['ok']
end
if dt ~= 'none' and dt ~= 'list' then
  return redis.error_reply('WRONGTYPE ' .. dst .. ' is a ' .. dt .. ', not a list: nothing moved')
end
-- Read the items in the order they move (oldest first from the right end,
-- or newest take first from the left), in slices that double from 16, and
-- stop at n items or once they hold BUDGET bytes: a chunk of large payloads
-- stays small in Lua's memory and in the time it holds Redis.
local BUDGET = 8388608
local items, k, bytes, step = {}, 0, 0, 16
while k < n and bytes < BUDGET do
  local want, got = math.min(step, n - k), nil
  if front then
    got = redis.call('LRANGE', src, k, k + want - 1)
    for i = 1, #got do
      k = k + 1
      items[k] = got[i]
      bytes = bytes + #got[i]
    end
  else
    got = redis.call('LRANGE', src, -(k + want), -(k + 1))
    for i = #got, 1, -1 do
      k = k + 1
      items[k] = got[i]
      bytes = bytes + #got[i]
    end
  end
  if #got < want then
    break
  end
  step = step * 2
end
if k == 0 then
  return {0, 0, 0, 0}
end
local seq = tonumber(redis.call('HGET', rec, 'seq') or '0')
local t = redis.call('TIME')
local ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local function bytes(v, len)
  local b = {}
  for i = len, 1, -1 do
    b[i] = v % 256
    v = math.floor(v / 256)
  end
  return string.char(unpack(b))
end

-- JSON as Go's encoding/json reads it into an http.Header
-- (map[string][]string): null, or an object whose values are null or
-- arrays of strings and nulls, with white space between tokens. Strings
-- may hold any byte but control characters, and the escapes \" \\ \/ \b
-- \f \n \r \t \uXXXX (Go replaces invalid UTF-8 and lone surrogates
-- rather than failing).
local function ws(h, p)
  return string.find(h, '[^ \t\r\n]', p) or #h + 1
end

-- The position after the JSON string at p, or nil.
local function str(h, p)
  if string.sub(h, p, p) ~= '"' then
    return nil
  end
  p = p + 1
  while true do
    local q = string.find(h, '[%z\1-\31"\\]', p)
    if not q then
      return nil
    end
    local c = string.sub(h, q, q)
    if c == '"' then
      return q + 1
    end
    if c ~= '\\' then
      return nil
    end
    local e = string.sub(h, q + 1, q + 1)
    if e == 'u' then
      if not string.find(h, '^%x%x%x%x', q + 2) then
        return nil
      end
      p = q + 6
    elseif e ~= '' and string.find('"\\/bfnrt', e, 1, true) then
      p = q + 2
    else
      return nil
    end
  end
end

-- 'object' or 'null' when h is a header line Go reads, else nil.
local function header_kind(h)
  local p = ws(h, 1)
  if string.sub(h, p, p + 3) == 'null' then
    if ws(h, p + 4) > #h then
      return 'null'
    end
    return nil
  end
  if string.sub(h, p, p) ~= '{' then
    return nil
  end
  p = ws(h, p + 1)
  if string.sub(h, p, p) == '}' then
    if ws(h, p + 1) > #h then
      return 'object'
    end
    return nil
  end
  while true do
    p = str(h, p)
    if not p then
      return nil
    end
    p = ws(h, p)
    if string.sub(h, p, p) ~= ':' then
      return nil
    end
    p = ws(h, p + 1)
    if string.sub(h, p, p + 3) == 'null' then
      p = p + 4
    elseif string.sub(h, p, p) == '[' then
      p = ws(h, p + 1)
      if string.sub(h, p, p) == ']' then
        p = p + 1
      else
        while true do
          if string.sub(h, p, p + 3) == 'null' then
            p = p + 4
          else
            p = str(h, p)
            if not p then
              return nil
            end
          end
          p = ws(h, p)
          local c = string.sub(h, p, p)
          if c == ']' then
            p = p + 1
            break
          end
          if c ~= ',' then
            return nil
          end
          p = ws(h, p + 1)
        end
      end
    else
      return nil
    end
    p = ws(h, p)
    local c = string.sub(h, p, p)
    if c == '}' then
      if ws(h, p + 1) > #h then
        return 'object'
      end
      return nil
    end
    if c ~= ',' then
      return nil
    end
    p = ws(h, p + 1)
  end
end

local SIG = '\255\0\190\190J'
local prefix = bytes(ms, 6) .. ARGV[4]
local attempts = '0'
if front then
  attempts = '1'
end
local plain3 = attempts .. ',0,0,0,0,0;'
local headers, unreadable = 0, 0
local out = {}
for i = 1, k do
  local x = items[i]
  local id = prefix .. bytes((seq + i) % 4294967296, 4)
  local e = nil
  if string.sub(x, 1, 5) == SIG then
    local nl = string.find(x, '\n', 6, true)
    local kind = nil
    if nl then
      kind = header_kind(string.sub(x, 6, nl - 1))
    end
    if kind == 'object' then
      local h = string.sub(x, 6, nl - 1)
      e = '\3' .. id .. attempts .. ',0,0,0,0,' .. #h .. ';' .. h .. string.sub(x, nl + 1)
      headers = headers + 1
    elseif kind == 'null' then
      x = string.sub(x, nl + 1)
    else
      unreadable = unreadable + 1
    end
  end
  if not e then
    if front then
      e = '\3' .. id .. plain3 .. x
    else
      e = '\1' .. id .. x
    end
  end
  out[i] = e
end

-- The writes.
if front then
  redis.call('LTRIM', src, k, -1)
  drop_marker(dst)
else
  redis.call('LTRIM', src, 0, -k - 1)
end
for i = 1, k, 1000 do
  local j = math.min(i + 999, k)
  if front then
    redis.call('RPUSH', dst, unpack(out, i, j))
  else
    redis.call('LPUSH', dst, unpack(out, i, j))
  end
end
redis.call('HSET', rec, 'seq', seq + k, 'last', token .. ' ' .. k .. ' ' .. headers .. ' ' .. unreadable)
redis.call('HINCRBY', rec, ARGV[5], k)
return {k, headers, unreadable, 0}
