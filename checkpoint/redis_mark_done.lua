-- mark_done: ARGV[4] epoch, ARGV[5] frames, ARGV[6] timings JSON, ARGV[7] outbox event JSON
-- ('' = none), ARGV[8] how long the finished record is kept (ms, 0: for ever), ARGV[9] a JSON
-- list of more outbox events' JSON, appended after it ('[]' = none), ARGV[10] the review stage's
-- decision ('' = it did not run), ARGV[11] its summary JSON (decision and categories).
-- The record turns done, its review decision goes with it (a 'review' or 'block' one into the
-- review queue, unless a reviewer gave this version a verdict already) and the outbox entries
-- are appended in this one atomic step.
local epoch, frames, timings, event = ARGV[4], ARGV[5], ARGV[6], ARGV[7]
local review, summary = ARGV[10] or '', ARGV[11] or ''
local cur = redis.call('HMGET', VKEY, 'status', 'epoch', 'tenant', 'pipeline_version', 'verdicts')
local refused = check_owner(epoch, cur[1], cur[2], 'done')
if refused then
  return refused
end
local tenant = cur[3]
local now = now_us()
redis.call('HSET', VKEY, 'status', 'done', 'frames', frames, 'timings', timings,
  'finished_at', now, 'updated_at', now, 'lease_until', 0)
redis.call('HDEL', VKEY, 'stage')
-- Persisted chunk outputs go once the video is done; so do their marks.
for _, field in ipairs(redis.call('HKEYS', VKEY)) do
  if string.sub(field, 1, 2) == 'c:' then
    redis.call('HDEL', VKEY, field)
  end
end
reindex('running', tenant, 'done', tenant, now)
leave_review(tenant)
if review == '' then
  redis.call('HDEL', VKEY, 'review', 'review_summary')
else
  redis.call('HSET', VKEY, 'review', review, 'review_summary', summary)
  if (review == 'review' or review == 'block') and not verdict_of(cur[5], cur[4]) then
    redis.call('ZADD', review_index(review), now, VID)
    redis.call('ZADD', review_index(review, tenant), now, VID)
  end
end
expire_finished(ARGV[8])
local id = false  -- no outbox entry: nobody is notified (a backfill that says so)
if event ~= '' then
  id = redis.call('XADD', KEYS[3], '*', 'event', event)
end
for _, more in ipairs(cjson.decode(ARGV[9] or '[]')) do
  redis.call('XADD', KEYS[3], '*', 'event', more)
end
publish(tenant, 'done', nil, 0, nil, now)
return {'ok', id}
