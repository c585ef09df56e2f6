-- Ack plain takes (none keyed) of several queues in one call, for a
-- connection on a single Redis node, where one script may touch keys of
-- many queues (on a cluster a call must stay within one slot, and each
-- queue's acks go to ack.lua alone). A group per queue (and per
-- registration of the connection) does exactly what ack.lua does for it,
-- under its own field and token of that queue's replies hash: a call sent
-- again after a lost reply answers every group as the first send did, and
-- a late send of a call that is over does nothing, group by group.
--
-- KEYS ackKeys of each group in turn, 7 a group (see ack.lua)
-- ARGV for each group in turn: the number n of its takes, the connection
-- name, the field, the token, and the n takes
-- Returns one reply per group, each ack.lua's {registered, r1, ..., rn}.
local out, kb, ab = {}, 0, 0
while ab < #ARGV do
  local n = tonumber(ARGV[ab + 1])
  out[#out + 1] = ack_plain(kb, ab + 1, n)
  kb, ab = kb + 7, ab + 4 + n
end
return out
