-- Upsert a keyed item (see key_upsert in lib.lua): create the key's pending
-- item, update it in place, or park a successor behind its running
-- delivery. Returns the outcome (1 created, 2 updated, 3 kept, 4 queued).
--
-- Once per token, like a publish: KEYS[2], the record of the call slot the
-- call holds, keeps the token and outcome of the last call that ran under
-- it, and a send of the same call returns that outcome instead of running
-- again (-1 for a late send of an older call, which the caller no longer
-- reads).
--
-- KEYS[1] ready (routes the call), KEYS[2] the call's record
-- ARGV[1] queue prefix, ARGV[2] token, ARGV[3] key, ARGV[4] mode (A, P or
-- K), ARGV[5] delay ms, ARGV[6] due time (Redis ms, 0: none), ARGV[7]
-- MaxWait ms (0: none), ARGV[8] the keyed envelope
local P, token = ARGV[1], ARGV[2]
local out = recalled(KEYS[2], token)
if out then
  return out
end
local now = now_ms()
local due = now + tonumber(ARGV[5])
if tonumber(ARGV[6]) > 0 then
  due = tonumber(ARGV[6])
end
out = keyed().key_upsert(P, ARGV[3], ARGV[8], ARGV[4], due, tonumber(ARGV[7]), now)
remember(KEYS[2], token, out)
return out
