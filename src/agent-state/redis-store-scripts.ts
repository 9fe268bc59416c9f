// The Lua scripts of the Redis AgentStore: each write is one script, so that the owner's quota
// is checked and the write made in one step that no other replica can slip between, and a
// write is all or none.
//
// Keys, under the owner's base `<prefix>{<owner>}` (the hash tag keeps an owner in one slot):
//   :r:<id>        a response: hash v (its JSON), e (expires at, by the store's clock), p (previous id)
//   :c:<id>        a conversation: hash c (its JSON without metadata), m (metadata JSON), e, n (items numbered)
//   :ci:<id>       its items: hash item id -> item JSON
//   :cs:<id>       their order: sorted set item id, scored by its number
//   :u             the owner's units (a response, or a conversation with its items), scored by expiry
//   :uo, :ub       each unit's objects and bytes; :ut their totals (o, b)
// A conversation and its items live and expire together, so they are one unit: refreshing
// them costs one score, not one per item. The accounting is the truth for usage and quotas:
// a unit past its expiry (by the store's clock) is pruned from it, and its keys unlinked, by
// every write and by `usage`, whether or not Redis has freed the keys already.

/** What every script starts with: the owner's keys and the accounting functions. */
const PRELUDE = `
local base = KEYS[1]
local U, UO, UB, UT = base .. ':u', base .. ':uo', base .. ':ub', base .. ':ut'

local function unitKeys(member)
  if string.sub(member, 1, 2) == 'r:' then return {base .. ':' .. member} end
  local id = string.sub(member, 3)
  return {base .. ':c:' .. id, base .. ':ci:' .. id, base .. ':cs:' .. id}
end

-- What a unit counts for now: 0, 0 when it is not held.
local function held(member)
  if not redis.call('ZSCORE', U, member) then return 0, 0 end
  return tonumber(redis.call('HGET', UO, member) or '0'), tonumber(redis.call('HGET', UB, member) or '0')
end

local function drop(member)
  local o, b = held(member)
  if redis.call('ZREM', U, member) == 1 then
    redis.call('HINCRBY', UT, 'o', -o)
    redis.call('HINCRBY', UT, 'b', -b)
  end
  redis.call('HDEL', UO, member)
  redis.call('HDEL', UB, member)
  redis.call('UNLINK', unpack(unitKeys(member)))
end

local function prune(now)
  for _, member in ipairs(redis.call('ZRANGEBYSCORE', U, '-inf', '(' .. now)) do drop(member) end
end

-- The refusal checkQuota would make, as {'quota', objects, bytes, added objects, added bytes}.
local function over(addO, addB, maxO, maxB)
  local t = redis.call('HMGET', UT, 'o', 'b')
  local o, b = tonumber(t[1] or '0'), tonumber(t[2] or '0')
  if (addO > 0 and o + addO > tonumber(maxO)) or (addB > 0 and b + addB > tonumber(maxB)) then
    return {'quota', o, b, addO, addB}
  end
  return false
end

-- Sets a unit's counts (the totals follow) and, when given, its expiry.
local function account(member, objects, bytes, expires)
  local oldO, oldB = held(member)
  redis.call('HINCRBY', UT, 'o', objects - oldO)
  redis.call('HINCRBY', UT, 'b', bytes - oldB)
  redis.call('HSET', UO, member, objects)
  redis.call('HSET', UB, member, bytes)
  if expires then redis.call('ZADD', U, expires, member) end
end

-- Every unit expires within the time to live of the last write: so does the accounting.
local function touch(ttl)
  for _, key in ipairs({U, UO, UB, UT}) do redis.call('PEXPIRE', key, ttl) end
end

local function alive(key, now)
  local e = redis.call('HGET', key, 'e')
  return e and tonumber(e) >= tonumber(now)
end
`;

/** A script as `sharedRedis` defines it: one key (the owner's base), the rest arguments. */
const script = (lua: string) => ({ keys: 1, lua: PRELUDE + lua });

// ARGV: id, response JSON, previous id ('' for none), now, expires at, ttl ms, max objects, max bytes.
const PUT_RESPONSE = script(`
prune(ARGV[4])
local member = 'r:' .. ARGV[1]
local oldO, oldB = held(member)
local bytes = #ARGV[2]
local refused = over(1 - oldO, bytes - oldB, ARGV[7], ARGV[8])
if refused then return refused end
local key = base .. ':' .. member
redis.call('HSET', key, 'v', ARGV[2], 'e', ARGV[5], 'p', ARGV[3])
redis.call('PEXPIRE', key, ARGV[6])
account(member, 1, bytes, ARGV[5])
touch(ARGV[6])
return 'ok'
`);

// ARGV: id, now. Answers 1 when it was there.
const DELETE_RESPONSE = script(`
prune(ARGV[2])
local member = 'r:' .. ARGV[1]
local was = alive(base .. ':' .. member, ARGV[2])
drop(member)
return was and 1 or 0
`);

// ARGV: id, now, limit. Walks back from the newest: {1 if it reached the start, JSON...}, or
// nil at a hole (a response missing, expired, or another owner's: not under this base).
const RESPONSE_CHAIN = script(`
local out, current, limit = {0}, ARGV[1], tonumber(ARGV[3])
while current ~= '' do
  if #out - 1 >= limit then return out end
  local r = redis.call('HMGET', base .. ':r:' .. current, 'v', 'e', 'p')
  if not r[1] or tonumber(r[2]) < tonumber(ARGV[2]) then return false end
  out[#out + 1] = r[1]
  current = r[3] or ''
end
out[1] = 1
return out
`);

// ARGV: id, conversation JSON without metadata, metadata JSON, now, expires at, ttl ms, max
// objects, max bytes, then each item's id and JSON. One stored under the id before is replaced.
const CREATE_CONVERSATION = script(`
prune(ARGV[4])
local id = ARGV[1]
local member = 'c:' .. id
-- The conversation's JSON is its head with ',"metadata":' and the metadata before the brace.
local bytes, order, values = #ARGV[2] + 12 + #ARGV[3], {}, {}
for i = 9, #ARGV, 2 do
  local itemId, json = ARGV[i], ARGV[i + 1]
  if values[itemId] then bytes = bytes - #values[itemId] else order[#order + 1] = itemId end
  values[itemId] = json
  bytes = bytes + #json
end
local objects = 1 + #order
local oldO, oldB = held(member)
local refused = over(objects - oldO, bytes - oldB, ARGV[7], ARGV[8])
if refused then return refused end
drop(member)
local ckey, ikey, skey = base .. ':c:' .. id, base .. ':ci:' .. id, base .. ':cs:' .. id
redis.call('HSET', ckey, 'c', ARGV[2], 'm', ARGV[3], 'e', ARGV[5], 'n', #order)
for seq, itemId in ipairs(order) do
  redis.call('ZADD', skey, seq, itemId)
  redis.call('HSET', ikey, itemId, values[itemId])
end
for _, key in ipairs({ckey, ikey, skey}) do redis.call('PEXPIRE', key, ARGV[6]) end
account(member, objects, bytes, ARGV[5])
touch(ARGV[6])
return 'ok'
`);

// ARGV: id, now, expires at, ttl ms, max objects, max bytes, then each item's id and JSON.
// Answers 0 when the conversation is not there; an item id it holds is replaced in place.
const APPEND_ITEMS = script(`
prune(ARGV[2])
local id = ARGV[1]
local member, ckey, ikey, skey = 'c:' .. id, base .. ':c:' .. id, base .. ':ci:' .. id, base .. ':cs:' .. id
if not alive(ckey, ARGV[2]) then return 0 end
local addO, addB, fresh, values = 0, 0, {}, {}
for i = 7, #ARGV, 2 do
  local itemId, json = ARGV[i], ARGV[i + 1]
  local before = values[itemId] or redis.call('HGET', ikey, itemId)
  if before then addB = addB - #before else
    addO = addO + 1
    fresh[#fresh + 1] = itemId
  end
  values[itemId] = json
  addB = addB + #json
end
local refused = over(addO, addB, ARGV[5], ARGV[6])
if refused then return refused end
local n = redis.call('HINCRBY', ckey, 'n', #fresh)
for k, itemId in ipairs(fresh) do redis.call('ZADD', skey, n - #fresh + k, itemId) end
for itemId, json in pairs(values) do redis.call('HSET', ikey, itemId, json) end
redis.call('HSET', ckey, 'e', ARGV[3])
for _, key in ipairs({ckey, ikey, skey}) do redis.call('PEXPIRE', key, ARGV[4]) end
local oldO, oldB = held(member)
account(member, oldO + addO, oldB + addB, ARGV[3])
touch(ARGV[4])
return 1
`);

// ARGV: id, now, 1 when after an item (0 from the end), that item's id, limit, asc|desc.
// Answers nil when the conversation is not there, else {1 if more follow, item JSON...}.
const LIST_ITEMS = script(`
local id = ARGV[1]
local ikey, skey = base .. ':ci:' .. id, base .. ':cs:' .. id
if not alive(base .. ':c:' .. id, ARGV[2]) then return false end
local limit, asc = tonumber(ARGV[5]), ARGV[6] == 'asc'
local ids
if ARGV[3] == '1' then
  local seq = redis.call('ZSCORE', skey, ARGV[4])
  if not seq then return {0} end
  if asc then ids = redis.call('ZRANGEBYSCORE', skey, '(' .. seq, '+inf', 'LIMIT', 0, limit + 1)
  else ids = redis.call('ZREVRANGEBYSCORE', skey, '(' .. seq, '-inf', 'LIMIT', 0, limit + 1) end
elseif asc then ids = redis.call('ZRANGE', skey, 0, limit)
else ids = redis.call('ZREVRANGE', skey, 0, limit) end
local out = {0}
if #ids > limit then
  out[1] = 1
  ids[#ids] = nil
end
-- In slices: unpack has a bound on how many it spreads.
for from = 1, #ids, 1000 do
  local values = redis.call('HMGET', ikey, unpack(ids, from, math.min(from + 999, #ids)))
  for _, value in ipairs(values) do out[#out + 1] = value end
end
return out
`);

// ARGV: id, now, item id. Answers the item's JSON, or nil.
const GET_ITEM = script(`
if not alive(base .. ':c:' .. ARGV[1], ARGV[2]) then return false end
return redis.call('HGET', base .. ':ci:' .. ARGV[1], ARGV[3])
`);

// ARGV: id, now, item id. Answers 1 when the conversation held it.
const DELETE_ITEM = script(`
prune(ARGV[2])
local id = ARGV[1]
local member, ikey = 'c:' .. id, base .. ':ci:' .. id
if not alive(base .. ':c:' .. id, ARGV[2]) then return 0 end
local json = redis.call('HGET', ikey, ARGV[3])
if not json then return 0 end
redis.call('HDEL', ikey, ARGV[3])
redis.call('ZREM', base .. ':cs:' .. id, ARGV[3])
local o, b = held(member)
account(member, o - 1, b - #json, false)
return 1
`);

// ARGV: id, metadata JSON, now, expires at, ttl ms, max objects, max bytes. Answers the
// conversation's head and metadata, or nil when it is not there.
const UPDATE_CONVERSATION = script(`
prune(ARGV[3])
local id = ARGV[1]
local member, ckey = 'c:' .. id, base .. ':c:' .. id
if not alive(ckey, ARGV[3]) then return false end
local was = redis.call('HMGET', ckey, 'c', 'm')
local growth = #ARGV[2] - #(was[2] or '')
local refused = over(0, growth, ARGV[6], ARGV[7])
if refused then return refused end
redis.call('HSET', ckey, 'm', ARGV[2], 'e', ARGV[4])
for _, key in ipairs({ckey, base .. ':ci:' .. id, base .. ':cs:' .. id}) do redis.call('PEXPIRE', key, ARGV[5]) end
local o, b = held(member)
account(member, o, b + growth, ARGV[4])
touch(ARGV[5])
return {was[1], ARGV[2]}
`);

// ARGV: id, now. Answers 1 when it was there.
const DELETE_CONVERSATION = script(`
prune(ARGV[2])
local member = 'c:' .. ARGV[1]
local was = alive(base .. ':c:' .. ARGV[1], ARGV[2])
drop(member)
return was and 1 or 0
`);

// ARGV: now. Answers {objects, bytes}.
const USAGE = script(`
prune(ARGV[1])
local t = redis.call('HMGET', UT, 'o', 'b')
return {tonumber(t[1] or '0'), tonumber(t[2] or '0')}
`);

/** The store's scripts by the command names they are defined under. */
export const AGENT_STORE_SCRIPTS = {
  disaggAgentPutResponse: PUT_RESPONSE,
  disaggAgentDeleteResponse: DELETE_RESPONSE,
  disaggAgentResponseChain: RESPONSE_CHAIN,
  disaggAgentCreateConversation: CREATE_CONVERSATION,
  disaggAgentAppendItems: APPEND_ITEMS,
  disaggAgentListItems: LIST_ITEMS,
  disaggAgentGetItem: GET_ITEM,
  disaggAgentDeleteItem: DELETE_ITEM,
  disaggAgentUpdateConversation: UPDATE_CONVERSATION,
  disaggAgentDeleteConversation: DELETE_CONVERSATION,
  disaggAgentUsage: USAGE,
} as const;

/** The name of one of {@link AGENT_STORE_SCRIPTS}. */
export type AgentStoreScript = keyof typeof AGENT_STORE_SCRIPTS;
