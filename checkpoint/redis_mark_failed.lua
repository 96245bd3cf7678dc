-- mark_failed: ARGV[4] epoch ('' = never claimed), ARGV[5] tenant, ARGV[6] uri,
-- ARGV[7] pipeline version, ARGV[8] error code, ARGV[9] message, ARGV[10] stage ('' = none),
-- ARGV[11] outbox event JSON ('' = none), ARGV[12] how long the finished record is kept
-- (ms, 0: for ever).
-- Record and outbox entry change in this one atomic step.
local epoch, tenant, uri, version = ARGV[4], ARGV[5], ARGV[6], ARGV[7]
local code, message, stage, event = ARGV[8], ARGV[9], ARGV[10], ARGV[11]
local cur = redis.call('HMGET', VKEY, 'status', 'epoch', 'tenant', 'pipeline_version', 'error_code',
  'attempts')
local status, stored_epoch, old_tenant, old_version = cur[1], cur[2], cur[3], cur[4]
if epoch ~= '' then
  local refused = check_owner(epoch, status, stored_epoch, 'failed')
  if refused then
    return refused
  end
else
  -- An unclaimed failure (an invalid event) only records a video no valid event made known: a
  -- record that is queued, running, done, or failed after a claim belongs to that event's
  -- attempt, and a malformed re-send must neither overwrite it nor send a webhook for it.
  if status and not unclaimed_failure(status, cur[6]) then
    return {'known', status}
  end
  if status == 'failed' and old_version == version and cur[5] == code then
    return {'again'}  -- the same invalid event replayed
  end
end
local now = enter_status('failed', status, old_version, tenant, uri, version)
redis.call('HSET', VKEY, 'error_code', code, 'error_message', message, 'finished_at', now)
if stage ~= '' then
  redis.call('HSET', VKEY, 'stage', stage)
end
reindex(status, old_tenant, 'failed', tenant, now)
expire_finished(ARGV[12])
local id = false  -- no outbox entry: nobody is notified (a backfill that says so)
if event ~= '' then
  id = redis.call('XADD', KEYS[3], '*', 'event', event)
end
publish(tenant, 'failed', stage ~= '' and stage or nil, 0, nil, now)
return {'ok', id}
