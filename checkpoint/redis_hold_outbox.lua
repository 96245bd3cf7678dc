-- hold_outbox: KEYS[1] the outbox stream; ARGV[1] its group, ARGV[2] the consumer, ARGV[3..]
-- entry ids. Renews the consumer's hold on each entry it still owns (the entry's idle time
-- starts over, so no other notifier takes it over) and returns those ids. An entry another
-- consumer has taken over, or that is acknowledged, is left as it is and not returned.
local held = {}
for i = 3, #ARGV do
  local id = ARGV[i]
  local pending = redis.call('XPENDING', KEYS[1], ARGV[1], id, id, 1)
  if pending[1] and pending[1][2] == ARGV[2] then
    redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, id, 'JUSTID')
    held[#held + 1] = id
  end
end
return held
