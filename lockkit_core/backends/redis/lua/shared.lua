-- Places of read-write locks and semaphores on the redis:// backend, in one script run by
-- EVALSHA with the operation's name as ARGV[1]. Every key is in the hash slot of the lock's
-- "{<ns:key>}" tag, so Redis Cluster serves each call on one node.
--
-- The keys of one read-write lock (B = "lockkit:{<ns:key>}:rw") or semaphore (":sem"):
--   H  KEYS[1]  B..":h"              hash: holder id -> "<mode>|<expiry ms>|<token>|<holder>"
--   F  KEYS[2]  "lockkit:{<ns:key>}:f"  the key's fencing counter, shared with its plain lock
--   Q  KEYS[3]  B..":q"              zset of waiter ids, scored by arrival number (a counter)
--   W  KEYS[4]  B..":w"              hash: waiter id -> "<mode>|<expiry ms>|<lease ms>|
--                                      <channel>|<holder>"; and 'limit' (a semaphore's)
-- <mode> is 'read', 'write' or 'slot'; expiries are server ms (TIME), read once per call.
-- <id> is sha1hex(owner secret): the secret is never stored nor published.
--
-- ARGV[1]   KEYS     ARGV[2..]                                      returns
-- 'acquire' H F Q W  id, mode, limit, lease ms, holder, channel      {1, token} |
--                    or '', floor                                    {0, ms until a lease ends
--                                                                     or -1 if none does}
-- 'release' H F Q W  secret, floor                                  1 released | 0 not held
-- 'leave'   H F Q W  secret, floor                                  1 | 0
-- 'extend'  H        secret, lease ms                               1 extended | 0 not held
-- 'adopt'   H        secret, lease ms                               {1, token} | {0}
-- 'holders' H                                                       {id, mode, pttl, token,
--                                                                     holder, ...}
--
-- The rule (lockkit_core/places.py has it in Python): first come, first served. Walking the
-- queue from its head, waiters take their places while they fit beside the holders (a writer
-- alone, readers beside readers, fewer than 'limit' slots); the first that does not fit
-- stops the walk. A caller that is not queued takes a place only when nobody is queued.
--
-- Races it survives:
-- - a holder dies: its place expires by its lease; the next call, whoever makes it (a waiter
--   asks again when the soonest lease it was told of ends), drops it and serves the queue;
-- - the reply to an acquire is lost and the caller retries: it finds its own place, renewed;
-- - a waiter is handed a place after it gave up: its leave gives the place back and serves
--   the next; a waiter whose process died gets no notice (PUBLISH counts 0), so its place is
--   taken back at once and the next waiter is served in the same call.

local GRACE_MS = 2000
local H, F, Q, W = KEYS[1], KEYS[2], KEYS[3], KEYS[4]

local clock
local function now_ms()
  clock = clock or redis.call('time')
  return tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
end

-- as lua/lock.lua: max(last + 1, server time in us, floor + 1)
local function next_token(floor)
  clock = clock or redis.call('time')
  local token = math.max(tonumber(redis.call('get', F) or '0') + 1,
    tonumber(clock[1]) * 1000000 + tonumber(clock[2]), tonumber(floor) + 1)
  if token >= 2 ^ 53 then
    error({err = 'lockkit: fencing token of ' .. F .. ' out of range; is the server clock right?'})
  end
  token = string.format('%.0f', token)
  redis.call('set', F, token, 'px', 86400000)
  return token
end

local function place(id)
  local record = redis.call('hget', H, id)
  if not record then return nil end
  local mode, expires, token = string.match(record, '^(%a+)|(%d+)|(%d+)|')
  if tonumber(expires) <= now_ms() then
    redis.call('hdel', H, id)
    return nil
  end
  return mode, token, record
end

-- The modes of the live places (expired ones are dropped) and ms until the soonest ends.
local function holding()
  local all, modes, soonest = redis.call('hgetall', H), {}, nil
  local now = now_ms()
  for i = 1, #all, 2 do
    local mode, expires = string.match(all[i + 1], '^(%a+)|(%d+)|')
    local left = tonumber(expires) - now
    if left <= 0 then
      redis.call('hdel', H, all[i])
    else
      modes[#modes + 1] = mode
      if not soonest or left < soonest then soonest = left end
    end
  end
  return modes, soonest
end

local function fits(mode, limit, modes)
  if mode == 'write' then return #modes == 0 end
  if mode == 'read' then
    for _, m in ipairs(modes) do if m == 'write' then return false end end
    return true
  end
  return #modes < limit
end

local function keep(key, ms)
  if redis.call('pttl', key) < ms then redis.call('pexpire', key, ms) end
end

local function grant(id, mode, lease, holder, floor)
  local token = next_token(floor)
  redis.call('hset', H, id, mode .. '|' .. string.format('%.0f', now_ms() + lease) .. '|'
    .. token .. '|' .. holder)
  keep(H, lease)
  return token
end

local function drop(id)
  redis.call('zrem', Q, id)
  redis.call('hdel', W, id)
end

-- Tell a waiting process on its channel (see lock.lua): a shard channel in the lock's hash slot
-- ('lockkit:{...', Redis Cluster) goes by SPUBLISH, others by PUBLISH.
local function notify(channel, message)
  if string.sub(channel, 1, 9) == 'lockkit:{' then
    return redis.call('spublish', channel, message)
  end
  return redis.call('publish', channel, message)
end

-- Hand places to the queue's heads while they fit; `me` (the caller) is not notified.
-- Returns the token handed to `me`, if any.
local function serve(modes, floor, me)
  local limit = tonumber(redis.call('hget', W, 'limit') or '0')
  local mine
  while true do
    local head = redis.call('zrange', Q, 0, 0)[1]
    if not head then break end
    local entry = redis.call('hget', W, head)
    local mode, expires, lease, channel, holder
    if entry then
      mode, expires, lease, channel, holder =
        string.match(entry, '^(%a+)|(%d+)|(%d+)|([^|]*)|(.*)$')
    end
    if not mode or tonumber(expires) <= now_ms() then
      drop(head) -- its waiter stopped renewing its entry: gone
    elseif not fits(mode, limit, modes) then
      break
    else
      drop(head)
      local token = grant(head, mode, tonumber(lease), holder, floor)
      if head == me or notify(channel, head .. '|' .. token) > 0 then
        modes[#modes + 1] = mode
        if head == me then mine = token end
      else
        redis.call('hdel', H, head) -- nobody listens for it: serve the next instead
      end
    end
  end
  if redis.call('zcard', Q) == 0 then redis.call('del', W) end
  return mine
end

local op = ARGV[1]

if op == 'acquire' then
  local id, mode, limit, lease = ARGV[2], ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
  local holder, channel, floor = ARGV[6], ARGV[7], ARGV[8]
  local _, token, record = place(id)
  if token then
    -- our own place: the answer to an earlier attempt was lost, or it was handed to us
    redis.call('hset', H, id, (string.gsub(record, '^(%a+)|(%d+)|',
      '%1|' .. string.format('%.0f', now_ms() + lease) .. '|', 1)))
    keep(H, lease)
    return {1, token}
  end
  if mode == 'slot' then redis.call('hset', W, 'limit', limit) end
  local modes, soonest = holding()
  local mine = serve(modes, floor, id)
  if mine then return {1, mine} end
  if redis.call('zcard', Q) == 0 and fits(mode, limit, modes) then
    redis.call('del', W)
    return {1, grant(id, mode, lease, holder, floor)}
  end
  if channel ~= '' then
    -- queue (or keep our place), the entry outliving the lease we are told of: we ask
    -- again when it ends, which renews the entry
    if not redis.call('zscore', Q, id) then
      local last = redis.call('zrange', Q, -1, -1, 'withscores')[2]
      redis.call('zadd', Q, (tonumber(last) or 0) + 1, id)
    end
    local ms = math.max(soonest or 0, 0) + 2 * lease + GRACE_MS
    redis.call('hset', W, id, mode .. '|' .. string.format('%.0f', now_ms() + ms) .. '|'
      .. lease .. '|' .. channel .. '|' .. holder)
    if mode == 'slot' then redis.call('hset', W, 'limit', limit) end
    keep(Q, ms)
    keep(W, ms)
  elseif redis.call('zcard', Q) == 0 then
    redis.call('del', W)
  end
  return {0, soonest or -1}
end

if op == 'release' or op == 'leave' then
  local id = redis.sha1hex(ARGV[2])
  local queued = op == 'leave' and redis.call('zscore', Q, id)
  if queued then drop(id) end
  local _, token = place(id)
  if token then redis.call('hdel', H, id) end
  if token or queued then
    local modes = holding()
    serve(modes, ARGV[3], nil)
  end
  if token then return 1 end
  return 0
end

if op == 'extend' or op == 'adopt' then
  local id = redis.sha1hex(ARGV[2])
  local _, token, record = place(id)
  if not token then
    if op == 'adopt' then return {0} end
    return 0
  end
  local lease = tonumber(ARGV[3])
  redis.call('hset', H, id, (string.gsub(record, '^(%a+)|(%d+)|',
    '%1|' .. string.format('%.0f', now_ms() + lease) .. '|', 1)))
  keep(H, lease)
  if op == 'adopt' then return {1, token} end
  return 1
end

if op == 'holders' then
  local all, out = redis.call('hgetall', H), {}
  local now = now_ms()
  for i = 1, #all, 2 do
    local mode, expires, token, holder = string.match(all[i + 1], '^(%a+)|(%d+)|(%d+)|(.*)$')
    local left = tonumber(expires) - now
    if left > 0 then
      for _, v in ipairs({all[i], mode, left, token, holder}) do out[#out + 1] = v end
    end
  end
  return out
end

return redis.error_reply('lockkit: unknown operation ' .. tostring(op))
