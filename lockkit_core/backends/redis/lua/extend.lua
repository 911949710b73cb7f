-- Reset a lock's lease only if the caller owns it; an expired lease is never revived.
-- KEYS[1]  the lock key
-- ARGV[1]  owner token (32 hex)      ARGV[2]  new lease in milliseconds
-- Returns 1 if extended, 0 if ARGV[1] does not hold the key.
local current = redis.call('get', KEYS[1])
if current and string.sub(current, 1, 32) == ARGV[1] then
  redis.call('pexpire', KEYS[1], ARGV[2])
  return 1
end
return 0
