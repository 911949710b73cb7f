-- Take a lock if it is free, and stamp the grant with a fencing token.
-- KEYS[1] L, KEYS[2] F, KEYS[3] Q, KEYS[4] E (see the prelude)
-- ARGV[1] owner token (32 hex)   ARGV[2] lease in ms   ARGV[3] holder (host and pid)
-- ARGV[4] the caller's notice channel if it waits (joins the queue when busy), else ''
-- Returns {1, token} when granted, also when ARGV[1] already holds the key (the answer to an
-- earlier attempt was lost, or the lock was handed to us: the lease is renewed, the token
-- stays); {0, pttl} when another owner holds it, pttl being its remaining lease in ms.
local L, F, Q, E = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local owner, lease, holder = ARGV[1], ARGV[2], ARGV[3]

local function join()
  if ARGV[4] ~= '' then
    redis.call('zadd', Q, 'nx', now_us(), owner)
    local expires = math.floor(now_us() / 1000) + 2 * tonumber(lease)
    redis.call('hset', E, owner, string.format('%.0f', expires) .. '|' .. lease .. '|' .. ARGV[4] .. '|' .. holder)
    for _, k in ipairs({Q, E}) do
      if redis.call('pttl', k) < 2 * tonumber(lease) then
        redis.call('pexpire', k, 2 * tonumber(lease))
      end
    end
  end
end

local current = redis.call('get', L)
if current then
  if string.sub(current, 1, 32) == owner then
    redis.call('pexpire', L, lease)
    return {1, string.match(current, '^[^|]*|(%d+)')}
  end
  join()
  return {0, redis.call('pttl', L)}
end
if redis.call('exists', Q) == 1 then
  -- Expired without a release while others queue: serve them in order. A queued caller
  -- keeps its place; a new blocking one joins at the tail; a non-blocking one only looks.
  join()
  local to, token = hand_over(L, Q, E, F)
  if to == owner then
    return {1, token}
  end
  if to then
    return {0, redis.call('pttl', L)}
  end
end
local token = next_token(F)
redis.call('set', L, owner .. '|' .. token .. '|' .. holder, 'px', lease)
return {1, token}
