-- Delete a lock whoever holds it (admin), and wake waiters.
-- KEYS[1]  the lock key              ARGV[1]  the channel waiters listen on
-- Returns 1 if a lock was deleted, 0 if the key was free.
if redis.call('del', KEYS[1]) == 1 then
  redis.call('publish', ARGV[1], '')
  return 1
end
return 0
