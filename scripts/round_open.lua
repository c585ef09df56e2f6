-- Open a round: store its period and TTL at the first open, or when the
-- caller changes them (ARGV[3] = '1'), and return the stored {period, ttl}.
-- A caller that finds other settings stored refuses to open; nothing was
-- written then.
--
-- KEYS: the round's keys (see round_lib.lua)
-- ARGV[1] period (ms), ARGV[2] TTL (ms, 0 none; -1: not given, keep the
-- stored one), ARGV[3] '1' to change stored settings
local K = round_keys(KEYS)
local m = redis.call('HMGET', K.state, 'period', 'ttl')
local period, ttl = tonumber(ARGV[1]), tonumber(ARGV[2])
if m[1] and ARGV[3] ~= '1' then
  return {tonumber(m[1]), tonumber(m[2]) or 0}
end
if ttl < 0 then
  ttl = tonumber(m[2]) or 0
end
redis.call('HSET', K.state, 'period', round_int(period), 'ttl', round_int(ttl))
local old = tonumber(m[1])
if old and period < old then
  -- items may be due sooner than the waiting Next calls were told
  round_wake(K)
end
return {period, ttl}
