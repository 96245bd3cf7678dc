-- claim: ARGV[4] tenant, ARGV[5] uri, ARGV[6] pipeline version, ARGV[7] owner ('' = holds no
-- lease), ARGV[8] lease (ms), ARGV[9] the epoch the caller lost to another attempt ('' = none).
-- Returns {1, record} when there is nothing to do: done for this version, or (after a lost
-- epoch) settled by a newer attempt; {'busy', owner, ms left} while another owner's attempt
-- holds a live lease; {'taken'} when the id is another tenant's (nothing changes in these);
-- else the video is taken over: {0, record}.
local tenant, uri, version = ARGV[4], ARGV[5], ARGV[6]
local owner, lease_ms, lost = ARGV[7], tonumber(ARGV[8]), ARGV[9]
local cur = redis.call('HMGET', VKEY, 'status', 'tenant', 'pipeline_version', 'epoch', 'owner',
  'lease_until', 'attempts')
local status, old_tenant, old_version = cur[1], cur[2], cur[3]
local taken = other_tenant(old_tenant, tenant, status, cur[7])
if taken then
  return taken
end
if (status == 'done' and old_version == version) or status == 'deleted' then
  return {1, redis.call('HGETALL', VKEY)}  -- nothing to do (a deleted video is not redone)
end
if lost ~= '' and tonumber(cur[4]) > tonumber(lost) and status ~= 'running' then
  return {1, redis.call('HGETALL', VKEY)}
end
local held = lease_left(status, cur[5], cur[6], owner)
if held then
  return {'busy', cur[5], held}
end
local now = enter_status('running', status, old_version, tenant, uri, version)
redis.call('HINCRBY', VKEY, 'epoch', 1)
redis.call('HINCRBY', VKEY, 'attempts', 1)
redis.call('HSET', VKEY, 'started_at', now)
hold_lease(owner, lease_ms)
reindex(status, old_tenant, 'running', tenant, now)
publish(tenant, 'running', nil, 0, nil, now)
return {0, redis.call('HGETALL', VKEY)}
