-- Count one queue: {ready (all priorities), rejected, delayed, expired}.
-- KEYS[1] ready (routes the call); ARGV[1] queue prefix
local P = ARGV[1]
local ready = redis.call('LLEN', P .. ':ready')
if ready > 0 and redis.call('LINDEX', P .. ':ready', -1) == MARKER then
  ready = ready - 1
end
for _, p in ipairs(redis.call('ZRANGE', P .. ':levels', 0, -1)) do
  ready = ready + redis.call('LLEN', P .. ':ready:' .. p)
end
local expired = tonumber(redis.call('HGET', P .. ':meta', 'expired') or '0')
return {ready, redis.call('LLEN', P .. ':rejected'), redis.call('ZCARD', P .. ':delayed'), expired}
