-- The counts of one round: {items, due, oldest lag (ms), issued, issued in
-- the last complete 10 s window, expired, period, ttl}. Items counts those
-- whose TTL has not run out; due counts the items whose last issue is a
-- period ago or more, including any whose TTL ran out and that are not
-- removed yet. The oldest lag is how long the most overdue item has been
-- due: the first of the front line since it joined it, or the least
-- recently issued one since its period ended. Changes nothing.
--
-- KEYS: the round's keys (see round_lib.lua); ARGV[1] period, ARGV[2] ttl
-- (the caller's, used when none is stored)
local K = round_keys(KEYS)
local now = now_ms()
local period, ttl = round_settings(K, ARGV[1], ARGV[2])
local items = redis.call('ZCARD', K.order) - redis.call('ZCOUNT', K.expiry, '-inf', round_int(now))
local due = redis.call('ZCOUNT', K.order, '-inf', round_int(now - period))
local lag = 0
local front = redis.call('ZRANGEBYSCORE', K.order, '-inf', '(0', 'LIMIT', 0, 1)
if #front > 0 then
  local s = redis.call('HGET', K.info, front[1])
  if s then
    lag = now - round_info(s)[5]
  end
end
local issued = redis.call('ZRANGEBYSCORE', K.order, 0, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
if #issued > 0 then
  lag = math.max(lag, now - tonumber(issued[2]) - period)
end
local m = redis.call('HMGET', K.state, 'issued', 'win', 'win_n', 'prev_n', 'expired')
local w, cw, window = math.floor(now / ROUND_WINDOW), tonumber(m[2]), 0
if cw == w then
  window = tonumber(m[4]) or 0
elseif cw == w - 1 then
  window = tonumber(m[3]) or 0
end
return {items, due, math.max(lag, 0), tonumber(m[1]) or 0, window, tonumber(m[5]) or 0, period, ttl}
