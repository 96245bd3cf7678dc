-- prune: KEYS[1] an index (sorted set of video ids by updated time); ARGV[1] key prefix,
-- ARGV[2] only entries scored before this (µs), ARGV[3] at most this many looked at. Drops the
-- entries whose record is gone (expired after redis.finished_retention_s, or lost): list()
-- drops them only from the pages it reads. Returns how many went.
local P, before, limit = ARGV[1], ARGV[2], tonumber(ARGV[3])
local gone = 0
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. before, 'LIMIT', 0, limit)) do
  if redis.call('EXISTS', P .. ':video:' .. id) == 0 then
    redis.call('ZREM', KEYS[1], id)
    gone = gone + 1
  end
end
return gone
