-- mark_deleted: ARGV[4] the tenant asking ('' = any: a Kafka tombstone, keyed by the id alone),
-- ARGV[5] when the deletion was asked (ms since the epoch, the deletion event's time),
-- ARGV[6] outbox event JSON ('' = none), ARGV[7] how long the tombstone is kept (ms, 0: for
-- ever). The record becomes a tombstone: status 'deleted', the epoch moved on (an attempt
-- under way is fenced out: its renewals, writes and final transition are refused from now),
-- and the outbox entry appended in the same step. A record of another tenant is refused
-- ({'taken'}); no record: a tombstone is made all the same, so a replayed old upload does not
-- bring the video back ({'ok', id, 'new'}).
local asker, asked_ms, event = ARGV[4], ARGV[5], ARGV[6]
local cur = redis.call('HMGET', VKEY, 'status', 'tenant', 'pipeline_version', 'attempts', 'uri')
local status, old_tenant, old_version = cur[1], cur[2], cur[3]
if asker ~= '' then
  local taken = other_tenant(old_tenant, asker, status, cur[4])
  if taken then
    return taken
  end
end
if status == 'deleted' then
  return {'again'}
end
local tenant = old_tenant or (asker ~= '' and asker) or 'default'
local now = enter_status('deleted', status, old_version, tenant, cur[5] or '', old_version or '')
redis.call('HINCRBY', VKEY, 'epoch', 1)
redis.call('HSET', VKEY, 'finished_at', now, 'deleted_ms', asked_ms)
redis.call('HDEL', VKEY, 'event', 'swept_at', 'owner')
reindex(status, old_tenant, 'deleted', tenant, now)
expire_finished(ARGV[7])
local id = false
if event ~= '' then
  id = redis.call('XADD', KEYS[3], '*', 'event', event)
end
publish(tenant, 'deleted', nil, 0, nil, now)
return {'ok', id, status and 'known' or 'new'}
