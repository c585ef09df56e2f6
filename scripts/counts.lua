-- Count one queue: {ready (all priorities; stale stubs of keyed items do
-- not count), rejected, delayed, expired, keyed pending, keyed running,
-- keyed parked, paused (0/1), and the totals published, acked, rejected,
-- retried (see tally in lib.lua), and the rate limit's rate_n and rate_ms
-- (0: none, see WithRateLimit), then of groups (see grouped() in lib.lua):
-- groups with pending deliveries, groups with deliveries in flight, the
-- group concurrency K (0: unset), and the per-group rate's grate_n and
-- grate_ms (0: none)}. The pending deliveries of groups count as ready.
-- KEYS: the queue's keys (see scriptKeys in keys.go)
local P = queue_keys()
local ready = redis.call('LLEN', P.ready)
if ready > 0 and redis.call('LINDEX', P.ready, -1) == MARKER then
  ready = ready - 1
end
for _, p in ipairs(redis.call('ZRANGE', P.levels, 0, -1)) do
  local k = ready_key(P, p)
  if k then
    ready = ready + redis.call('LLEN', k)
  end
end
local m = redis.call('HMGET', P.meta, 'expired', 'kstale', 'paused', 'np', 'na', 'nr', 'nt', 'lm', 'rate_n', 'rate_ms',
  'gk', 'grate_n', 'grate_ms')
ready = ready + redis.call('HLEN', P.gitems)
ready = ready - tonumber(m[2] or '0')
local paused = 0
if m[3] then
  paused = 1
end
-- the totals: the minutes before the last one counted, and that minute's
local totals = {tonumber(m[4] or '0'), tonumber(m[5] or '0'), tonumber(m[6] or '0'), tonumber(m[7] or '0')}
if m[8] then
  local s = tonumber(m[8]) % HSLOTS
  local last = redis.call('HMGET', P.meta, 'p' .. s, 'a' .. s, 'r' .. s, 't' .. s)
  for c = 1, 4 do
    totals[c] = totals[c] + tonumber(last[c] or '0')
  end
end
-- plain publishes not folded into meta yet (see fold_fast in lib.lua)
for _, n in ipairs(redis.call('HVALS', P.pub)) do
  totals[1] = totals[1] + tonumber(n)
end
return {ready, redis.call('LLEN', P.rejected), redis.call('ZCARD', P.delayed), tonumber(m[1] or '0'),
  redis.call('HLEN', P.kpend), redis.call('HLEN', P.krun), redis.call('HLEN', P.kpark), paused,
  totals[1], totals[2], totals[3], totals[4], tonumber(m[9] or '0') or 0, tonumber(m[10] or '0') or 0,
  redis.call('HLEN', P.gidx), redis.call('HLEN', P.grun), tonumber(m[11] or '0') or 0,
  tonumber(m[12] or '0') or 0, tonumber(m[13] or '0') or 0}
