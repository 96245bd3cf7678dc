-- review_verdict: ARGV[4] the tenant asking ('' = any), ARGV[5] the verdict ('approve' |
-- 'remove'), ARGV[6] the reviewer, ARGV[7] the note ('' = none), ARGV[8] the verdict's id.
-- A done video the review stage flagged ('review' or 'block') gets the verdict for its pipeline
-- version: appended to the record's 'verdicts', appended to the audit stream, and the video out
-- of the review queue, in this one atomic step. Returns {'ok', verdict JSON}; {'missing'} for no
-- record or another tenant's; {'not_queued', status, decision} for a video not in the queue;
-- {'given', verdict JSON} when its version has a verdict already; a repeat of this same
-- verdict (its id: a retry whose first reply was lost) answers 'ok' again and writes nothing.
local asker, verdict, reviewer, note, verdict_id = ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8]
local cur = redis.call('HMGET', VKEY, 'status', 'tenant', 'pipeline_version', 'review',
  'verdicts')
local status, tenant, version, decision = cur[1], cur[2], cur[3], cur[4]
if not status or (asker ~= '' and tenant ~= asker) then
  return {'missing'}
end
local given = verdict_of(cur[5], version)
if given then
  return {given.id == verdict_id and 'ok' or 'given', cjson.encode(given)}
end
if status ~= 'done' or (decision ~= 'review' and decision ~= 'block') then
  return {'not_queued', status, decision or ''}
end
local entry = {
  id = verdict_id,
  video_id = VID,
  tenant = tenant,
  decision = decision,
  verdict = verdict,
  reviewer = reviewer,
  note = note,
  at = now_us(),  -- a string: Lua numbers would round the microseconds
  pipeline_version = version,
}
local verdicts = cjson.decode(cur[5] or '[]')
verdicts[#verdicts + 1] = entry
redis.call('HSET', VKEY, 'verdicts', cjson.encode(verdicts))
leave_review(tenant)
-- Append-only (never trimmed): what reviewers decided outlives the records.
redis.call('XADD', P .. ':review:audit', '*', 'id', verdict_id, 'video_id', VID, 'tenant', tenant,
  'decision', decision, 'verdict', verdict, 'reviewer', reviewer, 'note', note, 'at', entry.at,
  'pipeline_version', version)
return {'ok', cjson.encode(entry)}
