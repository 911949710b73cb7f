-- Take a lock if it is free, and stamp the grant with a fencing token.
-- KEYS[1]  the lock key              KEYS[2]  the fencing counter (one per database)
-- ARGV[1]  owner token (32 hex)      ARGV[2]  lease in milliseconds
-- ARGV[3]  holder description (host and pid, for the admin view)
-- Value stored at KEYS[1]: "<owner>|<token>|<holder>".
-- Returns {1, token} when granted, also when ARGV[1] already holds the key (the answer to an
-- earlier attempt was lost on the way back: the lease is renewed, the token stays);
-- {0, pttl} when another owner holds it, pttl being its remaining lease in ms.
-- A missing counter (new database, or a restart that lost the data) starts from the server's
-- clock in microseconds, so tokens keep increasing across such a restart.
local current = redis.call('get', KEYS[1])
if not current then
  if redis.call('exists', KEYS[2]) == 0 then
    local now = redis.call('time')
    redis.call('set', KEYS[2], now[1] .. string.format('%06d', tonumber(now[2])))
  end
  local token = redis.call('incr', KEYS[2])
  redis.call('set', KEYS[1], ARGV[1] .. '|' .. string.format('%.0f', token) .. '|' .. ARGV[3], 'px', ARGV[2])
  return {1, token}
end
if string.sub(current, 1, 32) == ARGV[1] then
  redis.call('pexpire', KEYS[1], ARGV[2])
  return {1, tonumber(string.match(current, '^[^|]*|(%d+)'))}
end
return {0, redis.call('pttl', KEYS[1])}
