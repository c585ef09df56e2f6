-- Helpers of the round scripts (scripts/round_*.lua). scripts.go puts those
-- a script uses in front of it, with the ones of lib.lua it uses (now_ms).
--
-- Every round script gets all of the round's keys as KEYS, in this order
-- (see roundKeys in keys.go), and touches no other key:
--   order   sorted set id -> place in the round
--   data    hash id -> data
--   info    hash id -> 'added,issued,last,expireAt,front' (ms, Redis's clock)
--   expiry  sorted set id -> expireAt, for the items that have a TTL
--   state   hash: period, ttl, seq, issued, expired, win, win_n, prev_n
--   signal  list: a marker while items may be due that waiters do not know of
-- and, for Add, Remove and Reissue, which run once per token like a
-- publish (see recalled in lib.lua), the record of the call slot the call
-- holds:
--   record  string 'token:outcome' (expires after REPLY_KEEP)
--
-- (The fields are not named meta or wake: scripts.go picks helpers by the
-- words a script uses, and lib.lua defines those.)
local function round_keys(k)
  return {order = k[1], data = k[2], info = k[3], expiry = k[4], state = k[5], signal = k[6], record = k[7]}
end

-- Places in the round. An item that was issued sits at the time of its
-- last issue. An item that was never issued, or was reissued, waits in the
-- front line, at ROUND_FRONT plus its number in that line (the state's seq
-- counter): below every issue time, so that the front line is handed out
-- first, in the order items joined it. Scores stay integers below 2^53, so
-- doubles hold them exactly.
local ROUND_FRONT = -4503599627370496

-- How many expired items a call of Add or Next removes on its way
-- (round_sweep), and how many expired items a hand-out may find among the
-- due ones before it stops and lets the caller call again.
local ROUND_STEP = 10
local ROUND_SKIP = 100

-- The window of the hand-out rate, in ms.
local ROUND_WINDOW = 10000

-- An integer as a string with all its digits (tostring rounds to 14).
local function round_int(x)
  return string.format('%.0f', x)
end

-- The fields of an info string: {added, issued, last, expireAt, front}.
local function round_info(s)
  local a, i, l, x, f = string.match(s, '^(%d+),(%d+),(%d+),(%d+),(%d+)$')
  return {tonumber(a), tonumber(i), tonumber(l), tonumber(x), tonumber(f)}
end

local function round_info_string(m)
  return round_int(m[1]) .. ',' .. round_int(m[2]) .. ',' .. round_int(m[3]) .. ',' ..
    round_int(m[4]) .. ',' .. round_int(m[5])
end

-- The round's period and TTL in ms: those stored at its first open (or
-- changed since), else the caller's (the state hash was deleted behind the
-- round's back).
local function round_settings(K, period, ttl)
  local m = redis.call('HMGET', K.state, 'period', 'ttl')
  return tonumber(m[1]) or tonumber(period), tonumber(m[2]) or tonumber(ttl)
end

local function round_expired(m, now)
  return m[4] > 0 and m[4] <= now
end

-- Remove items from every key of the round.
local function round_drop(K, ids)
  for i = 1, #ids, 1000 do
    local j = math.min(i + 999, #ids)
    redis.call('ZREM', K.order, unpack(ids, i, j))
    redis.call('HDEL', K.data, unpack(ids, i, j))
    redis.call('HDEL', K.info, unpack(ids, i, j))
    redis.call('ZREM', K.expiry, unpack(ids, i, j))
  end
end

-- Remove up to max items whose TTL ran out, the earliest first, and count
-- them. Returns how many.
local function round_sweep(K, now, max)
  local gone = redis.call('ZRANGEBYSCORE', K.expiry, '-inf', round_int(now), 'LIMIT', 0, max)
  if #gone > 0 then
    round_drop(K, gone)
    redis.call('HINCRBY', K.state, 'expired', #gone)
  end
  return #gone
end

-- Tell waiting Next calls that an item may be due that they do not know of.
local function round_wake(K)
  if redis.call('LLEN', K.signal) == 0 then
    redis.call('LPUSH', K.signal, '1')
  end
end

-- Put id at the back of the front line.
local function round_to_front(K, id)
  local seq = redis.call('HINCRBY', K.state, 'seq', 1)
  redis.call('ZADD', K.order, round_int(ROUND_FRONT + seq), id)
end

-- The info of a live item, or nil when there is none; an item whose TTL
-- ran out is removed (and counted) on the way.
local function round_live(K, id, now)
  local s = redis.call('HGET', K.info, id)
  if not s then
    return nil
  end
  local m = round_info(s)
  if round_expired(m, now) then
    round_drop(K, {id})
    redis.call('HINCRBY', K.state, 'expired', 1)
    return nil
  end
  return m
end
