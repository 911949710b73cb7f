-- Task deduplication's run start and end on one server (batches.py), when no caller waits on
-- any of the locks involved: the common case, in a handful of commands and without loading the
-- general script's machinery (lock.lua) on every task. Whenever a lock has a queue of waiters
-- the script changes nothing and answers {-2}: the caller then sends lock.lua's 'batch', which
-- serves those waiters in order. The records written here are lock.lua's: the same
-- "<id>|<token>|<started>|<holder>" lease under the same key, with the same 'mark' token (no
-- fencing counter), so either script (and the admin reads) can act on them afterwards.
--
-- ARGV[1]  KEYS                          ARGV[2..]                         returns
-- 'begin'  run L, run Q, key L           run id, lease ms, holder, floor,  {1, run token, key
--                                        key secret                        token or -1} |
--                                                                          {0, run pttl} | {-2}
--   'mark' on the run record, then, only if it was taken, 'adopt' of the call's key.
-- 'end'    [marker L, marker Q],         guarded (0 or 1), [marker id,     {released 1/0, ...}
--          then L, Q of each release     marker ms, holder, floor], then   per release | {-2}
--                                        each release's secret; ARGV[2]
--                                        says how many markers (0 or 1)
--   'mark' of the finished marker if given, then 'release' of each lock in order. Guarded:
--   the last lock (the run record) guards the others; if it is not ours any more, nothing
--   is released (a copy that took the run over adopted the same keys with the same owner).

-- 'mark' of lock.lua on a lock without waiters: {1, token} taken or renewed, or {0, pttl}.
-- A free record (the usual case: a task id's run or finished record is new) is taken with
-- one SET NX; only a record already there is read. (One helper, not two: the script's body
-- runs on every call, and each function it defines is a closure made, then collected.)
local function mark(L, id, ms, holder, floor)
  local t = redis.call('time')
  -- The clock's microseconds and milliseconds as digits, without formatting numbers (which
  -- costs the server more than a command here), as lock.lua's fast path does.
  local us = string.rep('0', 6 - #t[2]) .. t[2]
  local token, started = t[1] .. us, t[1] .. string.sub(us, 1, 3)
  -- the token of a 'mark' grant: never below the floor, as every token (lock.lua)
  if tonumber(token) <= tonumber(floor) then
    token = string.format('%.0f', tonumber(floor) + 1)
  end
  if redis.call('set', L, id .. '|' .. token .. '|' .. started .. '|' .. holder, 'nx', 'px', ms) then
    return {1, token}
  end
  local current = redis.call('get', L)
  if string.sub(current, 1, 40) == id then
    redis.call('pexpire', L, ms)
    return {1, string.match(current, '^[^|]*|(%d+)')}
  end
  return {0, redis.call('pttl', L)}
end

if ARGV[1] == 'begin' then
  if redis.call('exists', KEYS[2]) == 1 then return {-2} end
  local ran = mark(KEYS[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5])
  if ran[1] ~= 1 then return ran end
  -- adopt: an expired lease is never revived, and a free key never taken
  local current = redis.call('get', KEYS[3])
  if current and string.sub(current, 1, 40) == redis.sha1hex(ARGV[6]) then
    redis.call('pexpire', KEYS[3], ARGV[3])
    return {1, ran[2], string.match(current, '^[^|]*|(%d+)')}
  end
  return {1, ran[2], -1}
end

if ARGV[1] == 'end' then
  local markers = tonumber(ARGV[2])
  -- every queue first, in one command: with a waiter anywhere, nothing is done here
  local queues = {}
  for k = 2, #KEYS, 2 do queues[#queues + 1] = KEYS[k] end
  if redis.call('exists', unpack(queues)) > 0 then return {-2} end
  local a = 4
  if markers == 1 then
    mark(KEYS[1], ARGV[4], ARGV[5], ARGV[6], ARGV[7])
    a = 8
  end
  local released = {}
  if ARGV[3] == '1' then
    local current = redis.call('get', KEYS[#KEYS - 1])
    if not current or string.sub(current, 1, 40) ~= redis.sha1hex(ARGV[#ARGV]) then
      for k = 2 * markers + 1, #KEYS, 2 do released[#released + 1] = 0 end
      return released
    end
  end
  -- the guard, last, was found ours above: it is freed without reading it again
  local last = ARGV[3] == '1' and #KEYS - 3 or #KEYS - 1
  for k = 2 * markers + 1, last, 2 do
    local current = redis.call('get', KEYS[k])
    -- a lease lost meanwhile (expired, forced, another owner's now) is left alone: 0
    if current and string.sub(current, 1, 40) == redis.sha1hex(ARGV[a]) then
      redis.call('del', KEYS[k])
      released[#released + 1] = 1
    else
      released[#released + 1] = 0
    end
    a = a + 1
  end
  if last < #KEYS - 1 then
    redis.call('del', KEYS[#KEYS - 1])
    released[#released + 1] = 1
  end
  return released
end

return redis.error_reply('lockkit: unknown run operation ' .. tostring(ARGV[1]))
