-- Delete a queue's ready deliveries (every priority) when ARGV[1] has 'r',
-- its rejected ones when it has 'j', and its delayed ones, its counters
-- (expired, published, acked, rejected, retried and their ring of minutes)
-- and its pause when it has 'd' (Destroy: a queue opened again under the
-- name starts from zero and unpaused; settings such as keep_expired stay).
-- Keyed items go with their stubs; 'd' deletes every pending keyed item.
-- Pending deliveries of groups count and go as ready ones.
-- Returns {ready, rejected, delayed} as counted before.
-- KEYS: the queue's keys (see scriptKeys in keys.go), with the queue's
-- resume list as the script's own key for 'd' (see pause.lua); ARGV[1] what
local P, own = queue_keys()
local what = ARGV[1]
local out = {0, 0, 0}
if string.find(what, 'r', 1, true) then
  local ready = P.ready
  out[1] = redis.call('LLEN', ready)
  if out[1] > 0 and redis.call('LINDEX', ready, -1) == MARKER then
    out[1] = out[1] - 1
  end
  redis.call('DEL', ready)
  for _, p in ipairs(redis.call('ZRANGE', P.levels, 0, -1)) do
    local k = ready_key(P, p)
    if k then
      out[1] = out[1] + redis.call('LLEN', k)
      redis.call('DEL', k)
    end
  end
  redis.call('DEL', P.levels)
  -- the pending deliveries of groups, with their lines and rotation; the
  -- in-flight counts stay, so that what is taken still frees its slot
  out[1] = out[1] + redis.call('HLEN', P.gitems)
  redis.call('DEL', P.gitems, P.gidx, P.gring, P.gwait)
  -- keyed items whose stubs waited in the lists go with them (a scan of
  -- the pending records: an operation for operators, not a hot path)
  local mk, kp = P.meta, P.kpend
  out[1] = out[1] - tonumber(redis.call('HGET', mk, 'kstale') or '0')
  redis.call('HDEL', mk, 'kstale')
  if not string.find(what, 'd', 1, true) then
    local cursor = '0'
    repeat
      local res = redis.call('HSCAN', kp, cursor, 'COUNT', 1000)
      cursor = res[1]
      local kv = res[2]
      for i = 1, #kv, 2 do
        local s, e = keyed().parse_rec(kv[i + 1])
        if not redis.call('ZSCORE', P.delayed, keyed().stub(meta(e)[2], s[1], kv[i])) then
          redis.call('HDEL', kp, kv[i])
        end
      end
    until cursor == '0'
  end
end
if string.find(what, 'j', 1, true) then
  out[2] = redis.call('LLEN', P.rejected)
  redis.call('DEL', P.rejected)
end
if string.find(what, 'd', 1, true) then
  out[3] = redis.call('ZCARD', P.delayed)
  -- not seq: ids made from it must stay unique while unacked ones live
  redis.call('DEL', P.delayed)
  -- the counters (see tally in lib.lua) and the pause, whose resume list
  -- would otherwise wake waiters of the next pause
  local fields = {'expired', 'paused', 'lm', 'np', 'na', 'nr', 'nt'}
  for i = 0, HSLOTS - 1 do
    for _, c in ipairs({'m', 'p', 'a', 'r', 't'}) do
      fields[#fields + 1] = c .. i
    end
  end
  redis.call('HDEL', P.meta, unpack(fields))
  redis.call('DEL', P.pub)
  if own ~= P.ready then
    redis.call('DEL', own)
  end
  -- every pending keyed item, parked ones too; running ones stay with
  -- their connections and can still be settled
  redis.call('DEL', P.kpend, P.kpark)
end
return out
