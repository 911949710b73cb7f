-- A waiter gives up: leave the queue, and pass on the lock if it was handed to us meanwhile.
-- KEYS[1] L, KEYS[2] F, KEYS[3] Q, KEYS[4] E (see the prelude)
-- ARGV[1] owner token (32 hex)
-- Returns 1 if a lock handed to the caller was passed on, else 0.
redis.call('zrem', KEYS[3], ARGV[1])
redis.call('hdel', KEYS[4], ARGV[1])
local current = redis.call('get', KEYS[1])
if current and string.sub(current, 1, 32) == ARGV[1] then
  free(KEYS[1], KEYS[3], KEYS[4], KEYS[2])
  return 1
end
return 0
