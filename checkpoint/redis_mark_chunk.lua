-- mark_chunk: ARGV[4] epoch, ARGV[5] chunk index, ARGV[6] 'processed' | 'restored',
-- ARGV[7] chunks in the video ('' = not known yet).
-- The chunk's outputs are persisted before this runs; on resume the chunk is not recomputed.
local epoch, index, kind, total = ARGV[4], ARGV[5], ARGV[6], ARGV[7]
local cur = redis.call('HMGET', VKEY, 'status', 'epoch')
local refused = check_owner(epoch, cur[1], cur[2], nil)
if refused then
  return refused
end
redis.call('HSET', VKEY, 'c:' .. index, 1)
redis.call('HINCRBY', VKEY, 'chunks_' .. kind, 1)
if total ~= '' then
  redis.call('HSET', VKEY, 'chunks_total', total)
end
return {'ok'}
