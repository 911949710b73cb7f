-- Every lock operation of the redis:// backend, in one script: loaded once, run by EVALSHA
-- with the operation's name as ARGV[1]. One file keeps the shared hand-over code in one place
-- while each call still declares every key it touches (Redis Cluster requires that).
--
-- The keys of one lock, all in the hash slot of "{<namespace>:<key>}":
--   L  KEYS[1]  "lockkit:{<ns:key>}"    "<id>|<token>|<holder>", the lease as its PX
--   F  KEYS[2]  "lockkit:{<ns:key>}:f"  the key's last fencing token; lives FENCE_MS past a grant
--   Q  KEYS[3]  "lockkit:{<ns:key>}:q"  zset of waiter ids, scored by arrival number (a counter)
--   E  KEYS[4]  "lockkit:{<ns:key>}:e"  hash: waiter id -> "<expiry ms>|<lease ms>|<channel>|<holder>"
-- <id> is an owner's public name: the first 8 characters of its 32-character secret, then the
-- first 32 of sha1hex(secret). The secret is never stored nor published: the operations that
-- act on a held lock present it, and only its id is compared.
--
-- ARGV[1]   KEYS     ARGV[2..]                                   returns
-- 'acquire' L F Q E  id, lease ms, holder, channel or '', floor  {1, token} | {0, pttl}
-- 'release' L F Q E  secret, floor                               1 released | 0 not held
-- 'leave'   L F Q E  secret, floor                               1 passed a handed lock on | 0
-- 'force'   L F Q E  floor                                       1 released | 0 was free
-- 'extend'  L        secret, lease ms                            1 extended | 0 not held
-- 'adopt'   L        secret, lease ms                            {1, token} | {0}
-- <floor> is the highest token the calling client has seen on any key: a new token is never
-- below it. <channel> is the waiting process's own notice channel ('' when not waiting).
--
-- Races it survives:
-- - the reply to an acquire is lost and the caller retries: the same id finds its own record
--   and gets its lease renewed and the same token, never "busy" and never a second token;
-- - a lease expires without a release while others queue: the next caller, whoever it is,
--   serves the queue in order first (a non-blocking caller cannot jump it);
-- - a waiter is handed the lock after it gave up: its leave passes the lock on (and its
--   process's listener does so when it left without a round trip);
-- - a waiter dies, or its listener is down, while queued: PUBLISH reaches nobody, so the next
--   waiter is served in the same call;
-- - the server restarts empty or its clock steps back: see next_token.

local FENCE_MS = 86400000 -- a free key's counter is forgotten a day after its last grant
local GRACE_MS = 2000 -- a waiter retries when the lease it was told of ends; this covers delays
local op = ARGV[1]
local L = KEYS[1]

local function id_of(secret)
  return string.sub(secret, 1, 8) .. string.sub(redis.sha1hex(secret), 1, 32)
end

local function holder_id()
  local current = redis.call('get', L)
  return current and string.sub(current, 1, 40), current
end

local function now_ms()
  local t = redis.call('time')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- max(last token + 1, server time in us, floor + 1): the counter alone keeps tokens rising while
-- it exists; the clock carries them over a lost counter (restart without persistence, expiry)
-- unless the clock stepped back further than the time since the last grant; the floor carries
-- them over that too, for every client that saw the higher token.
local function next_token(F, floor)
  local t = redis.call('time')
  local token = math.max(tonumber(redis.call('get', F) or '0') + 1,
    tonumber(t[1]) * 1000000 + tonumber(t[2]), tonumber(floor) + 1)
  if token >= 2 ^ 53 then -- past here a Lua number cannot add 1 (a clock set centuries ahead)
    error({err = 'lockkit: fencing token of ' .. F .. ' out of range; is the server clock right?'})
  end
  token = string.format('%.0f', token)
  redis.call('set', F, token, 'px', FENCE_MS)
  return token
end

-- Give the free lock to the oldest waiter that is still there. A notice that nobody received
-- (PUBLISH counts 0: the waiter's process died or its listener is down) means nobody would take
-- the lock up: the next waiter is served at once instead of the key idling for a lease. A
-- waiter that is alive but was skipped finds out on its next attempt and queues again.
-- Returns the id and token of the waiter served, or nil; `me` (the caller) gets no notice.
local function hand_over(F, Q, E, floor, me)
  local now
  while true do
    local head = redis.call('zrange', Q, 0, 0)[1]
    if not head then return nil end
    now = now or now_ms()
    redis.call('zrem', Q, head)
    local entry = redis.call('hget', E, head)
    redis.call('hdel', E, head)
    local expires, lease, channel, holder
    if entry then
      expires, lease, channel, holder = string.match(entry, '^(%d+)|(%d+)|([^|]*)|(.*)$')
    end
    if expires and tonumber(expires) > now then
      local token = next_token(F, floor)
      redis.call('set', L, head .. '|' .. token .. '|' .. holder, 'px', lease)
      if head == me or redis.call('publish', channel, head .. '|' .. token) > 0 then
        return head, token
      end
      redis.call('del', L)
    end
  end
end

local function free(F, Q, E, floor)
  redis.call('del', L)
  hand_over(F, Q, E, floor, nil)
end

if op == 'acquire' then
  local F, Q, E = KEYS[2], KEYS[3], KEYS[4]
  local id, lease, holder, channel, floor = ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
  -- A blocking caller queues (or keeps its place) and its entry is renewed to outlive the
  -- lease it is about to be told of, whatever its own lease: it tries again when that ends.
  local function join(pttl)
    if channel == '' then return end
    if not redis.call('zscore', Q, id) then
      local last = redis.call('zrange', Q, -1, -1, 'withscores')[2]
      redis.call('zadd', Q, (tonumber(last) or 0) + 1, id)
    end
    local keep = math.max(pttl, 0) + 2 * tonumber(lease) + GRACE_MS
    redis.call('hset', E, id, string.format('%.0f', now_ms() + keep) .. '|' .. lease .. '|'
      .. channel .. '|' .. holder)
    for _, k in ipairs({Q, E}) do
      if redis.call('pttl', k) < keep then redis.call('pexpire', k, keep) end
    end
  end
  local current_id, current = holder_id()
  if current then
    if current_id == id then
      -- our own lock: the answer to an earlier attempt was lost, or it was handed to us
      redis.call('pexpire', L, lease)
      return {1, string.match(current, '^[^|]*|(%d+)')}
    end
    local pttl = redis.call('pttl', L)
    join(pttl)
    return {0, pttl}
  end
  if redis.call('exists', Q) == 1 then
    -- Expired without a release while others queue: serve them in order. A queued caller
    -- keeps its place; a new blocking one joins at the tail; a non-blocking one only looks.
    join(0)
    local to, token = hand_over(F, Q, E, floor, id)
    if to == id then return {1, token} end
    if to then return {0, redis.call('pttl', L)} end
  end
  local token = next_token(F, floor)
  redis.call('set', L, id .. '|' .. token .. '|' .. holder, 'px', lease)
  return {1, token}
end

if op == 'release' or op == 'leave' then
  local F, Q, E = KEYS[2], KEYS[3], KEYS[4]
  local id = id_of(ARGV[2])
  if op == 'leave' then
    -- a waiter gives up; a lock handed to it meanwhile is passed on, not kept
    redis.call('zrem', Q, id)
    redis.call('hdel', E, id)
  end
  if holder_id() == id then
    free(F, Q, E, ARGV[3])
    return 1
  end
  return 0
end

if op == 'force' then
  if redis.call('exists', L) == 1 then
    free(KEYS[2], KEYS[3], KEYS[4], ARGV[2])
    return 1
  end
  return 0
end

if op == 'extend' or op == 'adopt' then
  -- an expired lease is never revived, and a free key never taken
  local current_id, current = holder_id()
  if current and current_id == id_of(ARGV[2]) then
    redis.call('pexpire', L, ARGV[3])
    if op == 'adopt' then return {1, string.match(current, '^[^|]*|(%d+)')} end
    return 1
  end
  if op == 'adopt' then return {0} end
  return 0
end

return redis.error_reply('lockkit: unknown operation ' .. tostring(op))
