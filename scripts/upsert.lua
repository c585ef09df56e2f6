-- Upsert a keyed item (see key_upsert in lib.lua): create the key's pending
-- item, update it in place, or park a successor behind its running
-- delivery. Returns the outcome (1 created, 2 updated, 3 kept, 4 queued).
--
-- Once per token, like a publish: its own key, the record of the call slot the
-- call holds, keeps the token and outcome of the last call that ran under
-- it, and a send of the same call returns that outcome instead of running
-- again (-1 for a late send of an older call, which the caller no longer
-- reads).
--
-- KEYS: the queue's keys, with the call's record as its own key (see
-- scriptKeys in keys.go)
-- ARGV[1] token, ARGV[2] key, ARGV[3] mode (A, P or
-- K), ARGV[4] delay ms, ARGV[5] due time (Redis ms, 0: none), ARGV[6]
-- MaxWait ms (0: none), ARGV[7] the keyed envelope
local P, rec = queue_keys()
local token = ARGV[1]
local out = recalled(rec, token)
if out then
  return out
end
local now = now_ms()
local due = now + tonumber(ARGV[4])
if tonumber(ARGV[5]) > 0 then
  due = tonumber(ARGV[5])
end
out = keyed().key_upsert(P, ARGV[2], ARGV[7], ARGV[3], due, tonumber(ARGV[6]), now)
remember(rec, token, out)
if out == keyed().CREATED or out == keyed().QUEUED then
  tally(P.meta, 'p', 1, now)
end
return out
