-- Release one take of a connection: back to ready after ARGV[4] ms (into
-- the delayed set) or at once (at the back of its priority's line; a
-- grouped delivery at the front of its group's line), with its attempt
-- counted and its lease ended.
-- Returns {registered, r}: r is 1 when released (by this call or an earlier
-- send of it: see remove_held in lib.lua), 0 when the take was not there,
-- 2 when it was not there because its lease ran out.
--
-- KEYS: the queue's keys with the connection's storage (see scriptKeys in
-- keys.go)
-- ARGV[1] connection, ARGV[2] the take's field,
-- ARGV[3] the call's token, ARGV[4] delay ms
local P, delay = queue_keys(), tonumber(ARGV[4])
local e, reply = remove_held(P, ARGV[1], ARGV[2], ARGV[3])
if not e then
  return reply
end
local now = now_ms()
tally(P.meta, 't', 1, now)
local p
e, p = again(e, now)
if is_keyed_take(ARGV[2]) then
  keyed().key_returned(P, keyed().key_of(e), e, now, now + delay, false)
elseif is_grouped_take(ARGV[2]) then
  -- at once: to the front of its group's line; later: it joins the back
  -- of the line when due
  grouped().returned(P, e, now, now + delay)
elseif delay > 0 then
  schedule(P, e, now + delay)
else
  push_ready(P, p, {e}, false)
end
return {1, 1}
