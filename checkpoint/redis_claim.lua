-- claim: ARGV[4] tenant, ARGV[5] uri, ARGV[6] pipeline version.
-- Returns {1, record} when done for this version (nothing changes), else {0, record};
-- {'taken'} when the id is another tenant's (nothing changes).
local tenant, uri, version = ARGV[4], ARGV[5], ARGV[6]
local cur = redis.call('HMGET', VKEY, 'status', 'tenant', 'pipeline_version')
local status, old_tenant, old_version = cur[1], cur[2], cur[3]
local taken = other_tenant(old_tenant, tenant)
if taken then
  return taken
end
if status == 'done' and old_version == version then
  return {1, redis.call('HGETALL', VKEY)}
end
local now = enter_status('running', status, old_version, tenant, uri, version)
redis.call('HINCRBY', VKEY, 'epoch', 1)
redis.call('HINCRBY', VKEY, 'attempts', 1)
redis.call('HSET', VKEY, 'started_at', now)
reindex(status, old_tenant, 'running', tenant, now)
publish(tenant, 'running', nil, 0, nil, now)
return {0, redis.call('HGETALL', VKEY)}
