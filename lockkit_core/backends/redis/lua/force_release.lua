-- Release a lock whoever holds it (admin): hand it to the oldest live waiter, else free it.
-- KEYS[1] L, KEYS[2] F, KEYS[3] Q, KEYS[4] E (see the prelude)
-- Returns 1 if a lock was released, 0 if the key was free.
if redis.call('exists', KEYS[1]) == 1 then
  free(KEYS[1], KEYS[3], KEYS[4], KEYS[2])
  return 1
end
return 0
