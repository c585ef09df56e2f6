-- Take up to ARGV[3] deliveries into the connection's unacked hash and
-- return {hint, e1, ..., en}. Before taking, it returns deliveries whose
-- lease ran out and moves due delayed deliveries to ready (bounded), so a
-- consuming queue needs no forwarder. It takes the highest priority first,
-- drops deliveries whose time to live ran out (counting them), and starts a
-- lease for each delivery that has a time to run.
--
-- hint tells the caller whether to wait: 0 means more may be ready now; n
-- > 0 means the next delivery is due (or lease runs out) in n ms; -1 means
-- nothing is scheduled.
--
-- Refuses (error LOST) when the connection is not registered for the queue
-- any more: a cleaner returned its deliveries.
--
-- A call is idempotent per token: field ARGV[5] (the queue handle) of the
-- connection's replies hash remembers the handle's last token and the ids
-- (with their attempts) it took, and a call with the same token (the client did not get the reply, or
-- go-redis sent the script again) returns those deliveries again (the ones
-- still unacked) instead of taking more. Without this, a lost reply would
-- leave deliveries in a live connection's storage that nobody works on.
--
-- KEYS[1] ready (routes the call)
-- ARGV[1] queue prefix, ARGV[2] connection, ARGV[3] how many, ARGV[4]
-- token, ARGV[5] field
local P, conn, n, token, field = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4], ARGV[5]
local uk, rk = P .. ':unacked:' .. conn, P .. ':replies:' .. conn
if redis.call('HEXISTS', P .. ':consumers', conn) == 0 then
  return redis.error_reply('LOST connection is not registered for this queue')
end
local now = now_ms()
local last = redis.call('HGET', rk, field)
if last and string.sub(last, 1, #token + 1) == token .. '|' then
  -- The record holds id .. attempts .. ',' per delivery taken: give back
  -- those still held at that attempt (a delivery whose lease ran out may
  -- be held again under a later attempt, by another caller).
  local out = {0}
  local ids, want = {}, {}
  local pos = #token + 2
  while pos <= #last do
    local comma = string.find(last, ',', pos + IDLEN, true)
    ids[#ids + 1] = string.sub(last, pos, pos + IDLEN - 1)
    want[#want + 1] = tonumber(string.sub(last, pos + IDLEN, comma - 1))
    pos = comma + 1
  end
  if #ids > 0 then
    for i, e in ipairs(redis.call('HMGET', uk, unpack(ids))) do
      if e and meta_of(e)[1] == want[i] then
        out[#out + 1] = e
      end
    end
  end
  return out
end
expire_leases(P, now, 100)
promote(P, now, math.max(n, 100))
local items, more = pop_ready(P, n)
local out, kv, ids, seen = {0}, {}, {}, {}
local lk = P .. ':leases'
for _, e in ipairs(items) do
  if e ~= MARKER then
    local b = string.byte(e, 1)
    if #e < IDLEN + 1 or (b ~= 1 and b ~= 3) then
      -- pushed by another program without an envelope: wrap it
      e = '\1' .. string.format('~%015d', redis.call('INCR', P .. ':seq')) .. e
      b = 1
    end
    local m = nil
    if b == 3 then
      m = meta(e)
    end
    if m and m[5] > 0 and m[5] <= now then
      expire(P, e)
    else
      local id = string.sub(e, 2, IDLEN + 1)
      if seen[id] then
        -- the same envelope twice in one take (a list copied by hand): the
        -- repeat gets an id of its own so both keep a slot in the hash
        id = string.format('~%015d', redis.call('INCR', P .. ':seq'))
        e = string.sub(e, 1, 1) .. id .. string.sub(e, IDLEN + 2)
      end
      seen[id] = true
      kv[#kv + 1] = id
      kv[#kv + 1] = e
      ids[#ids + 1] = id .. (m and m[1] or 0) .. ','
      out[#out + 1] = e
      if m and m[3] > 0 then
        redis.call('ZADD', lk, now + m[3], id .. conn)
      end
    end
  end
end
if #kv > 0 then
  redis.call('HSET', uk, unpack(kv))
end
redis.call('HSET', rk, field, token .. '|' .. table.concat(ids))
if not more then
  out[1] = next_event(P, now)
end
return out
