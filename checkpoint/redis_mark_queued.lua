-- mark_queued: ARGV[4] tenant, ARGV[5] uri, ARGV[6] pipeline version, ARGV[7] the lane it came
-- by ('fresh' | 'bulk'), ARGV[8] the event as JSON (kept, so that a record left running by an
-- owner that is gone can be sent through again: runtime/sweeper.py). Returns the record, or
-- {'taken'} when the id is another tenant's (nothing changes). A video deleted after this event
-- was sent, ARGV[9] (ms since the epoch; '' = unknown), stays deleted and its tombstone is
-- returned: a replayed old upload does not bring it back, an upload sent after its deletion
-- does.
local tenant, uri, version, lane, event = ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8]
local sent_ms = tonumber(ARGV[9]) or 0
local cur = redis.call('HMGET', VKEY, 'status', 'tenant', 'pipeline_version', 'attempts',
  'deleted_ms')
local status, old_tenant, old_version = cur[1], cur[2], cur[3]
local taken = other_tenant(old_tenant, tenant, status, cur[4])
if taken then
  return taken
end
if status == 'deleted' and sent_ms <= (tonumber(cur[5]) or 0) then
  return redis.call('HGETALL', VKEY)
end
if status == 'queued' or status == 'running' or (status == 'done' and old_version == version) then
  return redis.call('HGETALL', VKEY)
end
local now = enter_status('queued', status, old_version, tenant, uri, version)
redis.call('HSET', VKEY, 'lane', lane, 'event', event)
redis.call('HDEL', VKEY, 'swept_at')
reindex(status, old_tenant, 'queued', tenant, now)
publish(tenant, 'queued', nil, 0, nil, now)
return redis.call('HGETALL', VKEY)
