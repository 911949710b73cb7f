-- Delete a lock only if the caller owns it, and wake waiters.
-- KEYS[1]  the lock key
-- ARGV[1]  owner token (32 hex)      ARGV[2]  the channel waiters listen on
-- Returns 1 if released, 0 if ARGV[1] did not hold the key (expired or taken by another).
local current = redis.call('get', KEYS[1])
if current and string.sub(current, 1, 32) == ARGV[1] then
  redis.call('del', KEYS[1])
  redis.call('publish', ARGV[2], '')
  return 1
end
return 0
