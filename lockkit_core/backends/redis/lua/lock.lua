-- Every lock operation of the redis:// backend, in one script: loaded once, run by EVALSHA
-- with the operation's name as ARGV[1]. One file keeps the shared hand-over code in one place
-- while each call still declares every key it touches (Redis Cluster requires that).
--
-- The keys of one lock, all in the hash slot of "{<namespace>:<key>}":
--   L  KEYS[1]  "lockkit:{<ns:key>}"    "<id>|<token>|<started>|<holder>", the lease as its PX;
--                 <started>: server ms of the grant, from the TIME the token already read
--   F  KEYS[2]  "lockkit:{<ns:key>}:f"  the key's last fencing token; lives FENCE_MS past a grant
--   Q  KEYS[3]  "lockkit:{<ns:key>}:q"  zset of waiter ids, scored by arrival number (a counter)
--   E  KEYS[4]  "lockkit:{<ns:key>}:e"  hash: waiter id ->
--                 "<expiry ms>|<lease ms>|<channel>|<holder>" (fair=True waiters),
--                 "<expiry ms>|<lease ms>|<channel>|=<holder>" (fair=True waiters that read
--                 their grant from G), or
--                 "<expiry ms>|<lease ms>|<channel>|~<holder>" (fair=False); and, while the
--                 queue lives, 't' (server ms the head became the head), 'n' (locks taken
--                 past that head), 'h' ('<id>|<channel>' of the head when it is a fair=False
--                 waiter), 'w' (the head's id once it knows when to ask again), 'l' (the
--                 process that last freed the lock past the head), 's' (a
--                 fair=True waiter joined: no barging until the queue empties, and 't',
--                 'n', 'h', 'w' are no longer kept up to date, being read only to barge);
--                 Q and E always get the same expiry (see join)
--   G  "lockkit:{<ns:key>}:g:<id>"  list: the token handed to the waiter <id> of an '='
--                 entry, which waits for it with BLPOP. KEYS[5] of the waiter's own 'acquire'
--                 and of 'leave', which clear it. A release pushes to the head's without
--                 declaring it (the releaser cannot know the head beforehand): in the lock's
--                 hash slot all the same, and only on a single server, since a Cluster's
--                 waiters never make '=' entries (their grants come as notices).
-- <id> is an owner's public name: sha1hex(secret), 40 hex digits (its first 8 are the admin
-- hint). The secret is never stored nor published: the operations that
-- act on a held lock present it, and only its id is compared.
--
-- ARGV[1]   KEYS     ARGV[2..]                                   returns
-- 'acquire' L F Q E  id, lease ms, holder, channel or '', floor, {1, token} | {0, pttl} |
--       [G]          fair ('0', '1', '2': fair and reads G, or   {0, pttl, ask again in ms}
--                    '3': reads G, and sent that read with this call: a grant goes to G too)
-- 'release' L F Q E  secret, floor, channel or ''                1 released | 0 not held |
--                                                                {1, id, token} released and
--                                                                handed to waiter <id> of the
--                                                                caller's channel
-- 'leave'   L F Q E  secret, floor                               1 passed a handed lock on | 0
--           G
-- 'force'   L F Q E  floor                                       1 released | 0 was free
-- 'extend'  L        secret, lease ms                            1 extended | 0 not held
-- 'adopt'   L        secret, lease ms                            {1, token} | {0}
-- <floor> is the highest token the calling client has seen on any key: a new token is never
-- below it. <channel> is the waiting process's own notice channel ('' when not waiting); a
-- releaser passes its own while it has waiters, so a lock handed to one of them is named in
-- the reply (the releasing process wakes it: no notice, and the waiter sends nothing, since
-- the store's reply is proof, where a notice is not).
--
-- 'batch'   KEYS: 4 per operation (L F Q E of its lock, in order; 'adopt' reads only L)
--           ARGV[2..]: per operation <name>, <when>, <n>, then its n arguments as above;
--           <when> is 'always', or 'if-ok': only if the operation before it answered 1
--           returns one array per operation: its reply as above ({1} / {0} for a number),
--           or {-1} when 'if-ok' skipped it. <name> may also be 'mark': 'acquire' for a
--           record whose token nobody reads (task deduplication's run and finished records),
--           which keeps no fencing counter F for it (a day-long key per task, two commands).
-- A batch is one atomic step over the locks of several keys (task deduplication starts a run
-- with 'mark' on its run record then 'adopt' if-ok on the call's key, and ends it with
-- 'mark' of the finished record and 'release' of each lock it held). Those keys are in
-- different hash slots: a server in cluster mode refuses the batch (CROSSSLOT) before running
-- any of it, and the backend then sends each lock's operation alone (the Backend default),
-- so every single script still keeps to one lock's slot.
--
-- Races it survives:
-- - the reply to an acquire is lost and the caller retries: the same id finds its own record
--   and gets its lease renewed and the same token, never "busy" and never a second token;
-- - a lease expires without a release while others queue: the next caller, whoever it is,
--   serves the queue in order first (a non-blocking caller cannot jump it);
-- - a waiter is handed the lock after it gave up: its leave passes the lock on (and its
--   process's listener does so when it left without a round trip);
-- - a waiter dies, or its listener is down, while queued: its channel has no subscriber
--   (PUBSUB NUMSUB, which pattern subscribers do not fool), so the next waiter is served in
--   the same call;
-- - the server restarts empty or its clock steps back: see next_token; a clock step cannot
--   make barging unbounded either (see may_barge).
-- - a redelivered copy of a task asks to start a run while the first copy starts it: the batch
--   that takes the run record and adopts the call's key runs whole before or after the other
--   copy's, so exactly one of them gets the run record, and only that one adopts the key;
-- - a lease is lost between the start of a run and its end (expired, force-released, taken
--   by another owner): the ending batch's 'release' compares owner ids as 'release' does and
--   answers 0 for it, which the caller reports as a loss; it never frees another's lease.
--
-- Bounded barging (fair=False only). Handing the lock over on every release switches process
-- on every critical section, while a releaser that asks again at once would take it with no
-- switch. So while the queue's head is a fair=False waiter that has been the head for less
-- than BARGE_MS and was passed over fewer than BARGE_MAX times (and no fair=True waiter
-- joined), a release only frees the lock, and a fair=False blocking caller of the process
-- that released it (the same '<host> pid <pid>') may take it back past the queue. The head is never told "free" to race for it: it
-- is told when to ask again ('<id>|@<ms>', or the ms in its busy answer), PAUSE_MS after a
-- release (a releaser coming straight back has taken it by then) and again when its time as
-- the head is up; past that, releases hand over in order again (and a head that asks takes a
-- free lock at once). So each waiter ahead adds at
-- most about BARGE_MS to a fair=False waiter's wait, and a lock freed that way and taken by
-- nobody waits at most PAUSE_MS for the head. A head that does not receive that notice is
-- skipped; the others behind a head that may be passed over ask again at least every
-- RECHECK_MS, in case the head dies while the lock sits free.

local FENCE_MS = 86400000 -- a free key's counter is forgotten a day after its last grant
local GRACE_MS = 2000 -- a waiter retries when the lease it was told of ends; this covers delays
local BARGE_MS = 10 -- fair=False: a queue's head may be passed over for this long ...
local BARGE_MAX = 32 -- ... and at most this many times (the bound when the clock steps back)
local PAUSE_MS = 2 -- a head whose lock was freed past it asks again after this long
local RECHECK_MS = 1000 -- waiters behind a head that may be passed over ask at least this often
-- Whether this call found the queue Q there already ('release' below): free() need not ask.
local queued
-- The uncontended calls first, before the helpers below are made: the script's body runs
-- again on every call, and making their closures (then collecting them) costs the server more
-- than these few commands do. Same replies and writes as the general paths further down:
-- an 'acquire' of a free key nobody queues for, or (a caller that does not wait) of a key
-- another owner holds; a 'release' of a key nobody queues for.
if ARGV[1] == 'acquire' and ARGV[7] ~= '3' then
  local lease_key, fence = KEYS[1], KEYS[2]
  local current = redis.call('get', lease_key)
  if current then
    if ARGV[5] == '' and string.sub(current, 1, 40) ~= ARGV[2] then
      return {0, redis.call('pttl', lease_key)}
    end
  elseif redis.call('exists', KEYS[3]) == 0 then
    local t = redis.call('time') -- as next_token and started() below
    -- The clock's microseconds and milliseconds as digits, without formatting numbers
    -- (which costs the server more than a command here).
    local us = string.rep('0', 6 - #t[2]) .. t[2]
    local clock = tonumber(t[1] .. us)
    local token = math.max(tonumber(redis.call('get', fence) or '0') + 1, clock,
      tonumber(ARGV[6]) + 1)
    if token < 2 ^ 53 then -- else next_token below raises the error
      token = token == clock and t[1] .. us or string.format('%.0f', token)
      redis.call('set', fence, token, 'px', FENCE_MS)
      redis.call('set', lease_key,
        ARGV[2] .. '|' .. token .. '|' .. t[1] .. string.sub(us, 1, 3) .. '|' .. ARGV[4],
        'px', ARGV[3])
      return {1, token}
    end
  end
elseif ARGV[1] == 'release' then
  if redis.call('exists', KEYS[3]) == 0 then
    local current = redis.call('get', KEYS[1])
    if current and string.sub(current, 1, 40) == redis.sha1hex(ARGV[2]) then
      redis.call('del', KEYS[1])
      return 1
    end
    return 0
  end
  queued = true
end

-- The lease key of the lock an operation acts on: set by operate(), read by the helpers below.
local L

local function id_of(secret)
  return redis.sha1hex(secret)
end

local function holder_id()
  local current = redis.call('get', L)
  return current and string.sub(current, 1, 40), current
end

local clock -- the server's TIME, read once per call (a script runs atomically)
local function time()
  clock = clock or redis.call('time')
  return clock
end

local function now_ms()
  local t = time()
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- A grant's start for the admin views; next_token read the clock already (no command more).
local function started()
  return string.format('%.0f', now_ms())
end

-- The token of a 'mark' grant: nobody fences with it, so it needs no counter; still never
-- below the floor, as every token.
local function unfenced_token(floor)
  local t = time()
  return string.format('%.0f', math.max(tonumber(t[1]) * 1000000 + tonumber(t[2]),
    tonumber(floor) + 1))
end

-- max(last token + 1, server time in us, floor + 1): the counter alone keeps tokens rising while
-- it exists; the clock carries them over a lost counter (restart without persistence, expiry)
-- unless the clock stepped back further than the time since the last grant; the floor carries
-- them over that too, for every client that saw the higher token.
local function next_token(F, floor)
  local t = time()
  local token = math.max(tonumber(redis.call('get', F) or '0') + 1,
    tonumber(t[1]) * 1000000 + tonumber(t[2]), tonumber(floor) + 1)
  if token >= 2 ^ 53 then -- past here a Lua number cannot add 1 (a clock set centuries ahead)
    error({err = 'lockkit: fencing token of ' .. F .. ' out of range; is the server clock right?'})
  end
  token = string.format('%.0f', token)
  redis.call('set', F, token, 'px', FENCE_MS)
  return token
end

-- Whether a process listens on `channel`, asked without telling it anything. Its process
-- subscribes before its waiters queue, and its connection closes when it dies. (PUBLISH's
-- count of receivers is no answer: it counts pattern subscribers too, and one PSUBSCRIBE
-- lockkit:* of a monitoring tool would make every dead waiter look alive.) A channel in the
-- lock's hash slot ('lockkit:{...', Redis Cluster) is a shard channel.
local function listening(channel)
  local how = string.sub(channel, 1, 9) == 'lockkit:{' and 'shardnumsub' or 'numsub'
  return tonumber(redis.call('pubsub', how, channel)[2]) > 0
end

-- Tell a waiting process on its channel, if it listens there; whether it does. On a shard
-- channel, SPUBLISH reaches the node serving the slot only, where PUBLISH would flood every
-- node of the cluster bus.
local function notify(channel, message)
  if not listening(channel) then return false end
  if string.sub(channel, 1, 9) == 'lockkit:{' then
    redis.call('spublish', channel, message)
  else
    redis.call('publish', channel, message)
  end
  return true
end

-- A queue entry's fields: expiry ms, lease ms, channel, fair (a boolean), holder, and whether
-- the waiter reads its grant from its list G (mark '='). An entry without the fair=False mark
-- ('~' before the holder) is fair: it is served in order.
local function parse(entry)
  if not entry then return nil end
  local expires, lease, channel, mark, holder =
    string.match(entry, '^(%d+)|(%d+)|([^|]*)|([~=]?)(.*)$')
  return expires, lease, channel, mark ~= '~', holder, mark == '='
end

-- The queue has a new head, or none: its time as the head starts now, nobody has passed it
-- yet, and 'h' names it (with its channel) if it may be passed over at all. `strict`: the
-- caller knows a fair=True waiter joined ('s'), so nobody may pass any head until the queue
-- empties (see barging) and those fields would go unread: only an empty queue's E goes.
local function new_head(Q, E, strict)
  if strict then
    if redis.call('exists', Q) == 0 then redis.call('del', E) end
    return
  end
  local head = redis.call('zrange', Q, 0, 0)[1]
  if not head then
    redis.call('del', E)
    return
  end
  local _, _, channel, fair = parse(redis.call('hget', E, head))
  if channel and not fair then
    redis.call('hset', E, 't', string.format('%.0f', now_ms()), 'n', '0',
      'h', head .. '|' .. channel)
    redis.call('hdel', E, 'w')
  else
    redis.call('hset', E, 't', string.format('%.0f', now_ms()), 'n', '0')
    redis.call('hdel', E, 'w', 'h')
  end
end

-- Take `id` out of the queue, if it is there.
local function drop(Q, E, id)
  if not redis.call('zscore', Q, id) then return end
  local was_head = redis.call('zrange', Q, 0, 0)[1] == id
  redis.call('zrem', Q, id)
  redis.call('hdel', E, id)
  if was_head then new_head(Q, E) end
end

-- Give the free lock to the oldest waiter that is still there. A waiter whose process does not
-- listen (it died, or its listener is down) would not take the lock up: the next waiter is
-- served at once instead of the key idling for a lease. A waiter that is alive but was skipped
-- finds out on its next attempt and queues again. A waiter that reads its grant from its list
-- (mark '=') is not told: a notice would cost its process a thread switch per hand-over.
-- Returns the id and token of the waiter served, or nil; `me` (the caller) gets no notice,
-- nor does a waiter of the caller's own process (channel `here`): the third value, true,
-- says the caller's reply carries the grant to it. `strict`: as in new_head.
local function hand_over(F, Q, E, floor, me, here, strict)
  while true do
    local head = redis.call('zpopmin', Q)[1]
    if not head then return nil end
    local expires, lease, channel, _, holder, reads = parse(redis.call('hget', E, head))
    redis.call('hdel', E, head)
    new_head(Q, E, strict)
    if expires and tonumber(expires) > now_ms() then
      local token = next_token(F, floor)
      redis.call('set', L, head .. '|' .. token .. '|' .. started() .. '|' .. holder, 'px', lease)
      if head == me then return head, token end
      local ours = here ~= '' and channel == here
      if reads then
        if ours or listening(channel) then
          -- The grant itself, for a waiter blocked on it (BLPOP): it comes from the store,
          -- so it needs no confirming round trip as a notice does. Same hash slot.
          redis.call('rpush', L .. ':g:' .. head, token)
          redis.call('pexpire', L .. ':g:' .. head, lease)
          return head, token
        end
      elseif ours then
        return head, token, true
      elseif notify(channel, head .. '|' .. token) then
        return head, token
      end
      redis.call('del', L)
    end
  end
end

-- The queue's barging state: may a fair=False caller take the free lock past it now? Only
-- while its head is a fair=False waiter that became the head less than BARGE_MS ago by the
-- server clock, fewer than BARGE_MAX locks were taken past it, and no fair=True waiter joined.
-- A clock stepped back makes the head look young: the count still bounds it; stepped forward,
-- the order is kept. Also returns that head's id and channel, the head told when to ask
-- ('w'), when the head became the head, the process that last freed the lock past it, and
-- whether a fair=True waiter joined.
local function barging(E)
  local s = redis.call('hmget', E, 'h', 't', 'n', 's', 'w', 'l')
  local head, channel
  if s[1] then head, channel = string.match(s[1], '^(%x+)|(.*)$') end
  local since = tonumber(s[2] or '0')
  local may = head ~= nil and not s[4] and tonumber(s[3] or '0') < BARGE_MAX
    and now_ms() - since < BARGE_MS
  return may, head, channel, s[5], since, s[6], s[4] ~= false
end

-- `record`: the lease freed, '<id>|<token>|<started>|<holder>' ('' if unknown; a record
-- written before starts were kept has no '<started>|'); its holder's process
-- ('<host> pid <pid>') is the only one that may take the lock straight back past the queue
-- (a process that was merely slow to ask may not: two processes would take turns,
-- switching on every section as strict order does).
local function free(F, Q, E, floor, record, here)
  if not queued and redis.call('exists', Q) == 0 then
    redis.call('del', L)
    return
  end
  local may, head, channel, told, _, last, strict = barging(E)
  if may then
    redis.call('del', L)
    -- the holder alone: the start differs from grant to grant, the process does not
    local by = string.match(record, '^[^|]*|[^|]*|%d+|(.*)$')
      or string.match(record, '^[^|]*|[^|]*|(.*)$') or ''
    -- Freed past the queue. The head is told when to ask again, once; one that knows is not
    -- told again (if it died meanwhile, the release after its time skips it, and the others
    -- ask within RECHECK_MS if none comes).
    if told == head then
      if last ~= by then redis.call('hset', E, 'l', by) end
      return
    elseif notify(channel, head .. '|@' .. PAUSE_MS) then
      redis.call('hset', E, 'w', head, 'l', by)
      return
    end
  end
  -- A hand-over overwrites the lease (no DEL first); if nobody takes it, it goes.
  local to, token, carried = hand_over(F, Q, E, floor, nil, here, strict)
  if not to then redis.call('del', L) end
  return to, token, carried
end

-- One operation on one lock: K holds its keys (L F Q E), A its arguments with A[1] the name.
local function operate(op, K, A)
  L = K[1]
  if op == 'acquire' or op == 'mark' then
    local F, Q, E = K[2], K[3], K[4]
    local id, lease, holder, channel, floor = A[2], A[3], A[4], A[5], A[6]
    local fair, reads, pushes = A[7] ~= '0', A[7] == '2' or A[7] == '3', A[7] == '3'
    -- A grant to the caller. '3': the caller sent its read of G (BLPOP) in the same write,
    -- right behind this call, so G gets the token too (exactly it: an earlier one may be
    -- there unread), and that read returns at once.
    local function granted(token)
      if pushes then
        redis.call('del', K[5])
        redis.call('rpush', K[5], token)
        redis.call('pexpire', K[5], lease)
      end
      return {1, token}
    end
    -- A blocking caller queues (or keeps its place) and its entry is renewed to outlive the
    -- lease it is about to be told of, whatever its own lease: it tries again when that ends.
    local function join(pttl)
      if channel == '' then return end
      -- behind the last (NX: one queued already keeps its place; then the queue was not empty)
      local last = redis.call('zrange', Q, -1, -1, 'withscores')[2]
      redis.call('zadd', Q, 'nx', (tonumber(last) or 0) + 1, id)
      local first = not last
      local keep = math.max(pttl, 0) + 2 * tonumber(lease) + GRACE_MS
      local entry = string.format('%.0f', now_ms() + keep) .. '|' .. lease .. '|' .. channel
        .. '|' .. (reads and '=' or fair and '' or '~') .. holder
      if fair then
        redis.call('hset', E, id, entry, 's', '1')
      else
        redis.call('hset', E, id, entry)
      end
      if first then new_head(Q, E, fair) end
      -- Q and E get the same expiry, always here, together: one of them tells both's. They
      -- get GRACE_MS more than this entry needs, so the joins that follow within that time
      -- (a busy queue's, one per hand-over) need not set it again.
      if redis.call('pttl', Q) < keep then
        redis.call('pexpire', Q, keep + GRACE_MS)
        redis.call('pexpire', E, keep + GRACE_MS)
      end
    end
    local current_id, current = holder_id()
    if current then
      if current_id == id then
        -- our own lock: the answer to an earlier attempt was lost, or it was handed to us
        -- (its grant list, if any, was not read: see hand_over)
        redis.call('pexpire', L, lease)
        if K[5] then redis.call('del', K[5]) end
        return granted(string.match(current, '^[^|]*|(%d+)'))
      end
      local pttl = redis.call('pttl', L)
      join(pttl)
      if channel ~= '' and not fair then
        local may, head, _, told, since = barging(E)
        if may and head == id then
          -- the head of a queue that may be passed over asks again when that ends (never
          -- past BARGE_MS from now: the clock may have stepped back), so releases until then
          -- need not tell it (see free)
          if told ~= id then redis.call('hset', E, 'w', id) end
          return {0, pttl, math.max(1, math.min(pttl, BARGE_MS, since + BARGE_MS - now_ms()))}
        end
        -- a head answered without a time to ask must be told of the next release
        if told == id then redis.call('hdel', E, 'w') end
        if may then return {0, pttl, math.max(1, math.min(pttl, RECHECK_MS))} end
      end
      return {0, pttl}
    end
    if redis.call('exists', Q) == 1 then
      local may, head, last = false, nil, nil
      if channel ~= '' and not fair then
        local _
        may, head, _, _, _, last = barging(E)
      end
      if may and head ~= id and last == holder then
        -- fair=False, the head is young, and this process freed it: take it back
        drop(Q, E, id)
        redis.call('hincrby', E, 'n', 1)
      elseif may and head ~= id then
        -- freed past a young head by another process, which may take it back: queue (or keep
        -- our place) as if it were held; the head asks for it soon enough if nobody does
        join(0)
        return {0, 0, RECHECK_MS}
      else
        -- Expired without a release, or freed and the head asks: serve the queue in order. A
        -- queued caller keeps its place; a new blocking one joins at the tail; a non-blocking
        -- one only looks.
        join(0)
        local to, token = hand_over(F, Q, E, floor, id, '', fair and channel ~= '')
        if to == id then return granted(token) end
        if to then return {0, redis.call('pttl', L)} end
      end
    end
    local token = op == 'mark' and unfenced_token(floor) or next_token(F, floor)
    redis.call('set', L, id .. '|' .. token .. '|' .. started() .. '|' .. holder, 'px', lease)
    return granted(token)
  end

  if op == 'release' or op == 'leave' then
    local F, Q, E = K[2], K[3], K[4]
    local id = id_of(A[2])
    if op == 'leave' then
      -- a waiter gives up; a lock handed to it meanwhile is passed on, not kept, and one freed
      -- past the queue (the head that left would have asked for it) goes to the next in order
      drop(Q, E, id)
      if K[5] then redis.call('del', K[5]) end
      if redis.call('exists', L) == 0 then
        hand_over(F, Q, E, A[3], nil, '')
        return 0
      end
    end
    local current_id, current = holder_id()
    if current_id == id then
      local to, token, carried = free(F, Q, E, A[3], current, op == 'release' and A[4] or '')
      if carried then return {1, to, token} end
      return 1
    end
    return 0
  end

  if op == 'force' then
    if redis.call('exists', L) == 1 then
      free(K[2], K[3], K[4], A[2], '', '')
      return 1
    end
    return 0
  end

  if op == 'extend' or op == 'adopt' then
    -- an expired lease is never revived, and a free key never taken
    local current_id, current = holder_id()
    if current and current_id == id_of(A[2]) then
      redis.call('pexpire', L, A[3])
      if op == 'adopt' then return {1, string.match(current, '^[^|]*|(%d+)')} end
      return 1
    end
    if op == 'adopt' then return {0} end
    return 0
  end

  return redis.error_reply('lockkit: unknown operation ' .. tostring(op))
end

if ARGV[1] ~= 'batch' then
  return operate(ARGV[1], KEYS, ARGV)
end

-- 'batch': the operations one after another in this one atomic call (see the contract above).
local results, ok, k, i = {}, true, 0, 2
while i <= #ARGV do
  local op, when, n = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2])
  local A = {op}
  for j = 1, n do A[j + 1] = ARGV[i + 2 + j] end
  i = i + 3 + n
  local K = {KEYS[k + 1], KEYS[k + 2], KEYS[k + 3], KEYS[k + 4]}
  k = k + 4
  if when == 'if-ok' and not ok then
    results[#results + 1] = {-1}
  else
    local reply = operate(op, K, A)
    if type(reply) == 'table' and reply.err then return reply end
    if type(reply) ~= 'table' then reply = {reply} end
    ok = reply[1] == 1
    results[#results + 1] = reply
  end
end
return results
