-- A plain publish, run once per token: the guarded form. It comes in two
-- shapes, chosen by its size (see pushBatch):
--
-- * Small (a few envelopes): this script alone, with the envelopes in
--   ARGV[3..]. It pushes them to the head of ready unless a send of the
--   call ran already. One command, sent with EVALSHA: Redis refuses an
--   unknown script without running anything, and the call is sent again
--   with EVAL.
-- * Large: one MULTI/EXEC of an LPUSH of the envelopes and then this
--   script with no envelopes, so that the payloads never pass through Lua
--   (about 0.3µs a payload). When a send of the call ran already it undoes
--   the LPUSH, in the same atomic step, by popping the ARGV[2] envelopes
--   just pushed to the head. It is sent with EVAL, not EVALSHA, on every
--   send: a script that Redis did not know (its cache is empty after a
--   restart, a failover or SCRIPT FLUSH) would fail while the LPUSH before
--   it ran, recording no token, and a send of the call again after a lost
--   reply would land the envelopes twice.
--
-- go-redis sends a command again when the connection breaks before the
-- reply came (Redis shutting down, a timeout), and redq does too until
-- Redis answers, so the first send may have run, or may even run later
-- (it waited in a socket while Redis was paused). A call may also be sent
-- in one form and again in the other. KEYS[2], the record of the publish
-- field that the call holds, keeps the token of the last call that ran
-- under that field. A send whose token is not newer ran already, or
-- belongs to a call that is over, and lands nothing. A record expires
-- REPLY_KEEP after the last publish under its field.
-- Returns how many it published: 0 when the send had run already.
--
-- It counts what it published in the queue's counters (see tally in
-- lib.lua).
--
-- Where the client allows it, a call's first send is not this script but
-- a transaction without Lua on a connection of its own (see fence.go):
-- its LPUSH, a SET of KEYS[2] to the call's token, and a count in the
-- queue's pub hash. When that send gets no answer, its connection is
-- killed (CLIENT KILL ID ADDR) before the call is sent again in this
-- form, so that the first send either ran, and left its token here for
-- this script to find, or never runs.
--
-- KEYS[1] ready, KEYS[2] the field's publish record (a string), KEYS[3]
-- the queue's meta hash, and from a publisher that also publishes without
-- Lua, KEYS[4] the queue's pub hash, whose counts it folds into meta (see
-- fold_fast in lib.lua)
-- ARGV[1] token, ARGV[2] how many envelopes the call has, ARGV[3..] the
-- envelopes (small form only)
local last = redis.call('SET', KEYS[2], ARGV[1], 'GET', 'PX', REPLY_KEEP)
if last and tonumber(last) >= tonumber(ARGV[1]) then
  redis.call('SET', KEYS[2], last, 'PX', REPLY_KEEP)
  if #ARGV == 2 then
    redis.call('LPOP', KEYS[1], ARGV[2])
  end
  return 0
end
if #ARGV > 2 then
  redis.call('LPUSH', KEYS[1], unpack(ARGV, 3))
end
tally(KEYS[3], 'p', tonumber(ARGV[2]), now_ms())
if KEYS[4] then
  fold_fast(KEYS[3], KEYS[4])
end
return tonumber(ARGV[2])
