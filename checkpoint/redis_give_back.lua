-- give_back: ARGV[4] epoch, ARGV[5] tenant, ARGV[6] uri, ARGV[7] pipeline version, ARGV[8]
-- frames, ARGV[9] how long the finished record is kept (ms, 0: for ever).
-- The attempt holding the record found the id to be another tenant's video (Redis had lost
-- that video's record; the sinks know it): the record goes back to that tenant, done for the
-- version the sinks hold, and the refused event leaves nothing of its own. Nobody is notified.
local epoch, tenant, uri, version, frames = ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8]
local cur = redis.call('HMGET', VKEY, 'status', 'epoch', 'tenant', 'pipeline_version')
local refused = check_owner(epoch, cur[1], cur[2], nil)
if refused then
  return refused
end
local now = enter_status('done', cur[1], cur[4], tenant, uri, version)
redis.call('HSET', VKEY, 'frames', frames, 'finished_at', now)
reindex(cur[1], cur[3], 'done', tenant, now)
expire_finished(ARGV[9])
publish(tenant, 'done', nil, 0, nil, now)
return {'ok', false}
