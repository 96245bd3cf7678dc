-- Writer lease, let go by its holder (a newer holder's lease is left alone).
-- KEYS[1] the lease hash; ARGV[1] token, ARGV[2] owner. Returns 1 if released, else 0.
local held = redis.call('HMGET', KEYS[1], 'token', 'owner')
if held[1] == ARGV[1] and held[2] == ARGV[2] then
  return redis.call('DEL', KEYS[1])
end
return 0
