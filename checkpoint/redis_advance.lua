-- advance: ARGV[4] epoch, ARGV[5] stage, ARGV[6] chunks done, ARGV[7] total ('' = unknown),
-- ARGV[8] '0' when the stage has nothing to do for the video (flagged as 'sn:<stage>').
local epoch, stage, done, total = ARGV[4], ARGV[5], tonumber(ARGV[6]), ARGV[7]
local applicable = ARGV[8] ~= '0'
local cur = redis.call('HMGET', VKEY, 'status', 'epoch', 'tenant')
local refused = check_owner(epoch, cur[1], cur[2], nil)
if refused then
  return refused
end
local tenant = cur[3]
-- Chunks finish out of order across workers: a late, smaller count must not move done back.
local before = tonumber(redis.call('HGET', VKEY, 'sd:' .. stage))
if before and before > done then
  done = before
end
local now = now_us()
redis.call('HSET', VKEY, 'stage', stage, 'sd:' .. stage, done, 'updated_at', now)
if total ~= '' then
  redis.call('HSET', VKEY, 'st:' .. stage, total)
end
-- Each advance says whether the stage applies: the video behind an id may have changed.
if applicable then
  redis.call('HDEL', VKEY, 'sn:' .. stage)
else
  redis.call('HSET', VKEY, 'sn:' .. stage, 1)
end
local known_total = redis.call('HGET', VKEY, 'st:' .. stage)
reindex('running', tenant, 'running', tenant, now)
publish(tenant, 'running', stage, done, known_total and tonumber(known_total) or nil, now,
  applicable)
return {'ok'}
