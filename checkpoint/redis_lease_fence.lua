-- Writer lease, confirmed and extended in one step: right before each commit, and by the
-- holder's renewal. KEYS[1] the lease hash; ARGV[1] token, ARGV[2] owner, ARGV[3] lease (ms).
-- The owner is compared too: tokens start again at 1 if Redis loses its data, and a writer
-- must not mistake another's token 1 for its own.
-- Returns {1} while the lease is the caller's (now for ARGV[3] ms more); else
-- {0, holder, token} of whoever holds it ('' when nobody does).
local held = redis.call('HMGET', KEYS[1], 'token', 'owner')
if held[1] == ARGV[1] and held[2] == ARGV[2] then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return {1}
end
return {0, held[2] or '', held[1] or ''}
