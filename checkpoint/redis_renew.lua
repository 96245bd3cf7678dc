-- renew: ARGV[4] epoch, ARGV[5] lease (ms; 0 lets the attempt go now).
-- The owner of a running attempt keeps it: another owner's claim waits until the lease lapses.
local cur = redis.call('HMGET', VKEY, 'status', 'epoch', 'owner')
local refused = check_owner(ARGV[4], cur[1], cur[2], nil)
if refused then
  return refused
end
hold_lease(cur[3] or '', tonumber(ARGV[5]))
return {'ok'}
