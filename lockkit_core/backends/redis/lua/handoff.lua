-- Shared prelude of acquire, release, leave and force_release (prepended when loaded).
-- The keys of one lock, all in one cluster slot:
--   L  "lockkit:{<key>}"     value "<owner>|<token>|<holder>", with the lease as its PX
--   Q  "lockkit:{<key>}:q"   waiters in arrival order (zset: owner -> arrival, server us)
--   E  "lockkit:{<key>}:e"   hash: owner -> "<entry expiry ms>|<lease ms>|<channel>|<holder>"
-- where <channel> is the waiting process's own notice channel.
--   F  "lockkit:fence"       the fencing counter
-- A waiter's entry lives twice its lease unless renewed by its next attempt, so a waiter
-- that died stops being served within that time. (TIME before writes needs Redis 5 or
-- newer, where scripts replicate their effects.)

local function now_us()
  local t = redis.call('time')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- A missing counter (new database, or a restart that lost the data) starts from the server's
-- clock in microseconds, so tokens keep increasing across such a restart.
local function next_token(F)
  local token = redis.call('incr', F)
  if token == 1 then
    local t = redis.call('time')
    redis.call('set', F, t[1] .. string.format('%06d', tonumber(t[2])))
    token = redis.call('incr', F)
  end
  return string.format('%.0f', token)
end

-- Give the free lock L to the oldest waiter whose entry is alive, publishing
-- "<owner>|<token>" on that waiter's channel only. Returns that owner and token, or nil.
local function hand_over(L, Q, E, F)
  local now_ms
  while true do
    local head = redis.call('zrange', Q, 0, 0)[1]
    if not head then return nil end
    now_ms = now_ms or math.floor(now_us() / 1000)
    redis.call('zrem', Q, head)
    local entry = redis.call('hget', E, head)
    redis.call('hdel', E, head)
    if entry then
      local expires, lease, channel, holder = string.match(entry, '^(%d+)|(%d+)|([^|]*)|(.*)$')
      if expires and tonumber(expires) > now_ms then
        local token = next_token(F)
        redis.call('set', L, head .. '|' .. token .. '|' .. holder, 'px', lease)
        redis.call('publish', channel, head .. '|' .. token)
        return head, token
      end
    end
  end
end

-- Free L and hand it to the oldest live waiter, if any. Every blocking waiter is queued, so
-- nobody else needs a notice.
local function free(L, Q, E, F)
  redis.call('del', L)
  hand_over(L, Q, E, F)
end
