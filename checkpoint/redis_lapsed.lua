-- lapsed: records left queued or running with no live owner. KEYS none of the usual three;
-- ARGV[1] key prefix, ARGV[2] idle (µs): not updated, nor sent through again, for this long;
-- ARGV[3] at most this many. A running record counts once its lease lapsed. Each found is
-- stamped 'swept_at' (so it is sent through once per idle period) and returned as
-- {video_id, event JSON}; an index entry whose record is gone is dropped on the way.
local P, idle, limit = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now_ms = math.floor(now_us / 1000)
local before = string.format('%.0f', now_us - idle)
local found = {}
for _, status in ipairs({'queued', 'running'}) do
  local index = P .. ':idx:status:' .. status
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', index, '-inf', before, 'LIMIT', 0, limit)) do
    if #found >= limit then
      return found
    end
    local key = P .. ':video:' .. id
    local cur = redis.call('HMGET', key, 'status', 'lease_until', 'event', 'swept_at')
    if not cur[1] then
      redis.call('ZREM', index, id)
    elseif cur[1] == status and cur[3] then
      local lapsed = status == 'queued' or tonumber(cur[2] or 0) < now_ms
      local swept = tonumber(cur[4] or 0)
      if lapsed and now_us - swept >= idle then
        redis.call('HSET', key, 'swept_at', string.format('%.0f', now_us))
        table.insert(found, {id, cur[3]})
      end
    end
  end
end
return found
