-- Shared head of every checkpoint script (prepended by checkpoint/scripts.py).
-- KEYS[1] the video hash, KEYS[2] the progress stream, KEYS[3] the outbox stream.
-- ARGV[1] key prefix, ARGV[2] progress stream cap, ARGV[3] video id; ARGV[4..] per script.
-- Index keys are built from the prefix: on Redis Cluster give the prefix a hash tag ("{rs}")
-- so every key of the store lives in one slot.
local P = ARGV[1]
local VKEY = KEYS[1]
local VID = ARGV[3]

-- Server time in microseconds, as a string: Lua 5.1 numbers would print it as 1.7e+15.
local function now_us()
  local t = redis.call('TIME')
  return t[1] .. string.format('%06d', tonumber(t[2]))
end

local function status_index(status)
  return P .. ':idx:status:' .. status
end

local function tenant_index(tenant)
  return P .. ':idx:tenant:' .. tenant
end

local function tenant_status_index(tenant, status)
  return P .. ':idx:tenant:' .. tenant .. ':status:' .. status
end

-- The review queue of one decision ('review' or 'block'): every tenant's (tenant nil), or one
-- tenant's. Scored by done time, so it lists the oldest first.
local function review_index(decision, tenant)
  if tenant then
    return P .. ':idx:tenant:' .. tenant .. ':review:' .. decision
  end
  return P .. ':idx:review:' .. decision
end

-- The video out of the review queue, whichever decision held it.
local function leave_review(tenant)
  for _, decision in ipairs({'review', 'block'}) do
    redis.call('ZREM', review_index(decision), VID)
    if tenant then
      redis.call('ZREM', review_index(decision, tenant), VID)
    end
  end
end

-- The verdict a reviewer gave for pipeline ``version``, from the record's ``verdicts`` (a JSON
-- list, oldest first), or nil.
local function verdict_of(verdicts, version)
  for _, given in ipairs(cjson.decode(verdicts or '[]')) do
    if given.pipeline_version == version then
      return given
    end
  end
  return nil
end

-- Keep the list indexes in step with the record: every one is scored by updated time. A done
-- video that moves on (processed again, deleted) leaves the review queue: its decision went
-- with the result it was made for.
local function reindex(old_status, old_tenant, status, tenant, now)
  if old_status == 'done' then
    leave_review(old_tenant)
  end
  if old_status and (old_status ~= status or old_tenant ~= tenant) then
    redis.call('ZREM', status_index(old_status), VID)
    redis.call('ZREM', tenant_status_index(old_tenant, old_status), VID)
  end
  if old_tenant and old_tenant ~= tenant then
    redis.call('ZREM', tenant_index(old_tenant), VID)
  end
  redis.call('ZADD', P .. ':idx:all', now, VID)
  redis.call('ZADD', tenant_index(tenant), now, VID)
  redis.call('ZADD', status_index(status), now, VID)
  redis.call('ZADD', tenant_status_index(tenant, status), now, VID)
end

-- Live event for subscribers, and the same event in a capped stream for late readers.
-- ``applicable``: false when ``stage`` has nothing to do for the video (nil: it has).
local function publish(tenant, status, stage, done, total, now, applicable)
  local event = cjson.encode({
    video_id = VID,
    tenant = tenant,
    status = status,
    stage = stage or cjson.null,
    done = done or 0,
    total = total or cjson.null,
    applicable = applicable ~= false,
    at = now,
  })
  redis.call('PUBLISH', P .. ':progress', event)
  redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[2], '*', 'event', event)
end

-- A record made by its first transition.
local function create(tenant, uri, now)
  redis.call('HSET', VKEY, 'video_id', VID, 'tenant', tenant, 'uri', uri, 'created_at', now,
    'epoch', 0, 'attempts', 0, 'frames', 0)
end

-- Results of one pipeline version are worthless to another: drop stage progress with them.
-- Fields 'c:<index>' mark chunks whose outputs are persisted (see mark_chunk).
local function set_version(old_version, version)
  if old_version == version then
    return
  end
  local fields = redis.call('HKEYS', VKEY)
  for _, field in ipairs(fields) do
    local head = string.sub(field, 1, 3)
    if head == 'sd:' or head == 'st:' or head == 'sn:' or string.sub(field, 1, 2) == 'c:' then
      redis.call('HDEL', VKEY, field)
    end
  end
  redis.call('HDEL', VKEY, 'timings', 'chunks_total', 'chunks_processed', 'chunks_restored')
  redis.call('HSET', VKEY, 'frames', 0, 'pipeline_version', version)
end

-- A transition out of whatever the record held (``status`` and ``old_version``, nil when it has
-- no record yet) into ``new_status`` for ``version``: the record made if missing, progress of
-- another version dropped, and the stage and outcome of an earlier attempt cleared (the caller
-- sets its own). Returns the time of the transition.
local function enter_status(new_status, status, old_version, tenant, uri, version)
  local now = now_us()
  if not status then
    create(tenant, uri, now)
  end
  set_version(old_version, version)
  redis.call('HSET', VKEY, 'status', new_status, 'tenant', tenant, 'uri', uri, 'updated_at', now)
  redis.call('HDEL', VKEY, 'stage', 'error_code', 'error_message', 'finished_at', 'review',
    'review_summary')
  redis.call('HSET', VKEY, 'lease_until', 0)  -- a claim takes a lease of its own
  redis.call('PERSIST', VKEY)  -- a finished record that comes back is kept until it ends again
  return now
end

-- A finished record is kept ``retention_ms`` more (0: for ever); the videos table stays the
-- durable truth, and list() drops an expired record's index entries when it meets them.
local function expire_finished(retention_ms)
  if tonumber(retention_ms) > 0 then
    redis.call('PEXPIRE', VKEY, retention_ms)
  end
end

-- A record made by an invalid event alone, never claimed (failed, no attempt): it reports the
-- rejection and owns nothing, so a valid event of any tenant takes the id.
local function unclaimed_failure(status, attempts)
  return status == 'failed' and tonumber(attempts) == 0
end

-- A record belongs to the tenant whose valid event first named its id: another tenant's event
-- never takes it over. Returns the reply that refuses such an event, or nil.
local function other_tenant(old_tenant, tenant, status, attempts)
  if old_tenant and old_tenant ~= tenant and not unclaimed_failure(status, attempts) then
    return {'taken'}
  end
  return nil
end

-- Server time in milliseconds, the unit of leases.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- The attempt of a running record belongs to ``owner`` for ``lease_ms`` more (0: it is let go,
-- and an owner '' holds none): until then, only its owner may claim the video again.
local function hold_lease(owner, lease_ms)
  if owner == '' or lease_ms <= 0 then
    redis.call('HSET', VKEY, 'owner', owner, 'lease_until', 0)
  else
    local until_ms = string.format('%.0f', now_ms() + lease_ms)
    redis.call('HSET', VKEY, 'owner', owner, 'lease_until', until_ms)
  end
end

-- Milliseconds left of a lease another owner holds on a running record, else nil.
local function lease_left(status, holder, lease_until, owner)
  if status ~= 'running' or not holder or holder == '' or holder == owner then
    return nil
  end
  local left = tonumber(lease_until or 0) - now_ms()
  if left > 0 then
    return left
  end
  return nil
end

-- Fencing for writes after a claim: the caller must own the current epoch of a running record.
-- Returns nil when the write may go on, else the reply to return.
local function check_owner(epoch, status, stored_epoch, final)
  if not status then
    return {'missing'}
  end
  if tonumber(stored_epoch) ~= tonumber(epoch) then
    return {'stale', stored_epoch, status}
  end
  if final and status == final then
    return {'again'}  -- a retried final transition whose first reply was lost
  end
  if status ~= 'running' then
    return {'stale', stored_epoch, status}
  end
  return nil
end
