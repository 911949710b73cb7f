-- Release a lock only if the caller owns it: hand it to the oldest live waiter, else free it.
-- KEYS[1] L, KEYS[2] F, KEYS[3] Q, KEYS[4] E (see the prelude)
-- ARGV[1] owner token (32 hex)
-- Returns 1 if released, 0 if ARGV[1] did not hold the key (expired or taken by another).
local current = redis.call('get', KEYS[1])
if current and string.sub(current, 1, 32) == ARGV[1] then
  free(KEYS[1], KEYS[3], KEYS[4], KEYS[2])
  return 1
end
return 0
