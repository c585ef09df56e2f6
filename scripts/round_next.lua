-- Hand out up to ARGV[1] due items: those whose last issue is at least a
-- period ago by Redis's clock, the front line first, then the least
-- recently issued. Each is marked issued now (its place becomes now, its
-- issue count grows) in this one step, so no other call can hand it out
-- again within the period. Items whose TTL ran out are removed instead of
-- handed out, and up to ROUND_STEP more on the way.
--
-- Returns {hint, id1, data1, info1, ...}. hint is 0 when more items may be
-- due now (the call handed out as many as asked, or met ROUND_SKIP expired
-- ones), else the ms until the earliest item becomes due (at least 1), or
-- -1 when the round is empty; then the signal marker is deleted, since every
-- waiter learns of what is due from the hint or from the next marker.
--
-- KEYS: the round's keys (see round_lib.lua)
-- ARGV[1] max (at most 1000), ARGV[2] period (the caller's, used when
-- none is stored)
local K = round_keys(KEYS)
local n = tonumber(ARGV[1])
local now = now_ms()
local state = redis.call('HMGET', K.state, 'period', 'win', 'win_n', 'issued')
local period = tonumber(state[1]) or tonumber(ARGV[2])
round_sweep(K, now, ROUND_STEP)
local cutoff = round_int(now - period)
local nowStr = round_int(now)
local out = {0}
local taken, skipped = 0, 0
while taken < n and skipped < ROUND_SKIP do
  local due = redis.call('ZRANGEBYSCORE', K.order, '-inf', cutoff, 'LIMIT', 0, n - taken)
  if #due == 0 then
    break
  end
  local infos = redis.call('HMGET', K.info, unpack(due))
  local datas = redis.call('HMGET', K.data, unpack(due))
  local places, infoArgs, gone = {}, {}, {}
  for i, id in ipairs(due) do
    -- The fields that do not change stay strings: converting numbers to
    -- strings is most of the cost of a hand-out in Lua.
    local added, issued, expireAt
    if infos[i] then
      added, issued, expireAt = string.match(infos[i], '^(%d+),(%d+),%d+,(%d+),%d+$')
    end
    if not added or (expireAt ~= '0' and tonumber(expireAt) <= now) then
      gone[#gone + 1] = id
    else
      local s = added .. ',' .. (issued + 1) .. ',' .. nowStr .. ',' .. expireAt .. ',0'
      places[#places + 1] = nowStr
      places[#places + 1] = id
      infoArgs[#infoArgs + 1] = id
      infoArgs[#infoArgs + 1] = s
      out[#out + 1] = id
      out[#out + 1] = datas[i] or ''
      out[#out + 1] = s
    end
  end
  if #places > 0 then
    -- before the next look at the due ones, which must not see these again
    redis.call('ZADD', K.order, unpack(places))
    redis.call('HSET', K.info, unpack(infoArgs))
    taken = taken + #places / 2
  end
  if #gone > 0 then
    round_drop(K, gone)
    redis.call('HINCRBY', K.state, 'expired', #gone)
    skipped = skipped + #gone
  end
end
if taken > 0 then
  -- the hand-out counts: in all, and per window of ROUND_WINDOW ms (this
  -- one's and the one before, for the rate)
  local w = math.floor(now / ROUND_WINDOW)
  local cw, winN, prevN = tonumber(state[2]), taken, 0
  if cw == w then
    winN = winN + tonumber(state[3])
  elseif cw == w - 1 then
    prevN = tonumber(state[3]) or 0
  end
  if cw == w then
    redis.call('HSET', K.state, 'issued', (tonumber(state[4]) or 0) + taken, 'win_n', winN)
  else
    redis.call('HSET', K.state, 'issued', (tonumber(state[4]) or 0) + taken, 'win', round_int(w), 'win_n', winN, 'prev_n', prevN)
  end
end
if taken < n and skipped < ROUND_SKIP then
  local first = redis.call('ZRANGE', K.order, 0, 0, 'WITHSCORES')
  if #first == 0 then
    out[1] = -1
  else
    out[1] = math.max(1, tonumber(first[2]) + period - now)
  end
  redis.call('DEL', K.signal)
end
return out
