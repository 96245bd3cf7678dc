-- Writer lease (sinks/writer_lease.py), taken. KEYS[1] the lease hash, KEYS[2] its token
-- counter (never expires, so tokens only grow); ARGV[1] owner, ARGV[2] lease (ms).
-- Returns {token} once the caller holds it (its own token again if it held it already: a
-- retried call); {0, holder, ms left} while another writer holds it.
local held = redis.call('HMGET', KEYS[1], 'token', 'owner')
if held[2] == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {tonumber(held[1])}
end
if held[2] then
  return {0, held[2], redis.call('PTTL', KEYS[1])}
end
local token = redis.call('INCR', KEYS[2])
redis.call('HSET', KEYS[1], 'token', token, 'owner', ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {token}
