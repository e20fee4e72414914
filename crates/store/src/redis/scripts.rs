//! The Lua scripts of the Redis authority: every write is one script, so it runs alone on the
//! server and reaches the append-only file as one `MULTI`/`EXEC` block.
//!
//! Invariants of every script:
//! - **compare, then write**: a write script first reads what its decision was made from (a
//!   watermark, a lease group's last token, a worker's record) and writes nothing unless it is
//!   exactly that; the decision itself (block arithmetic, [`crate::lease::plan_acquire`],
//!   [`crate::lease::check_current`]) is made in Rust, never in Lua;
//! - **numbers are text**: Lua numbers are doubles, exact only below 2^53, so watermarks,
//!   tokens and floors are compared and stored as the decimal strings Rust wrote, never
//!   computed on (the audit sequence, an `INCR`, and the clock's milliseconds stay far below
//!   2^53);
//! - **no write before a check that can fail**: Redis does not roll a script back when a
//!   command in it fails, so the reads (which fail on a key of the wrong type) come first;
//! - **the store's clock**: audit entries are stamped with the server's `TIME`;
//! - `#!lua` marks write scripts (refused on a replica, and before they start when the server
//!   is out of memory, not halfway), `#!lua flags=no-writes` the reads.

use redis::Script;

/// Appends one audit entry: the next sequence number (`INCR` of the store's counter), stamped
/// with the server's clock, as stream entry `<seq>-0` of the subject's stream; notes the
/// subject. Returns the sequence number.
const APPEND: &str = r#"
local function append(seq_key, stream, subjects, subject, event, a, b, holder)
  redis.call('SADD', subjects, subject)
  local seq = redis.call('INCR', seq_key)
  local now = redis.call('TIME')
  local at = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
  redis.call('XADD', stream, string.format('%d-0', seq), 'at', string.format('%d', at),
    'event', event, 'a', a, 'b', b, 'holder', holder)
  return seq
end
"#;

/// Compare-and-advance of a watermark (and the retired mark: `'1'` set, `''` absent) with its
/// audit entry. KEYS: namespace, audit-seq, audit stream, audit-subjects.
/// ARGV: expected watermark, new watermark, event, a, b, holder, subject, expected mark, new
/// mark (a mark is only ever set, never cleared).
/// Returns `{0}` (no namespace), `{1, current, mark}` (another watermark or mark),
/// `{2, seq}` (written).
const ADVANCE: &str = r#"
local current = redis.call('HGET', KEYS[1], 'watermark')
if not current then return {0} end
local mark = redis.call('HGET', KEYS[1], 'retired') or ''
if current ~= ARGV[1] or mark ~= ARGV[8] then return {1, current, mark} end
local seq = append(KEYS[2], KEYS[3], KEYS[4], ARGV[7], ARGV[3], ARGV[4], ARGV[5], ARGV[6])
redis.call('HSET', KEYS[1], 'watermark', ARGV[2])
if ARGV[9] == '1' then redis.call('HSET', KEYS[1], 'retired', '1') end
return {2, seq}
"#;

/// Compare-and-set of a namespace's watermark, retired mark and parks together, with the
/// audit entries of the change. KEYS: namespace, parks, audit-seq, audit stream,
/// audit-subjects. ARGV: expected watermark, expected mark, expected parks (`''`: none), new
/// watermark, new mark, new parks (`''`: none), holder, subject, then per audit entry its
/// event, a and b. Returns `{0}` (no namespace), `{1}` (another watermark, mark or parks),
/// `{2}` (written).
const PARKS: &str = r#"
local current = redis.call('HGET', KEYS[1], 'watermark')
if not current then return {0} end
local mark = redis.call('HGET', KEYS[1], 'retired') or ''
local parks = redis.call('GET', KEYS[2]) or ''
if current ~= ARGV[1] or mark ~= ARGV[2] or parks ~= ARGV[3] then return {1} end
for i = 9, #ARGV, 3 do
  append(KEYS[3], KEYS[4], KEYS[5], ARGV[8], ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[7])
end
if ARGV[4] ~= current then redis.call('HSET', KEYS[1], 'watermark', ARGV[4]) end
if ARGV[5] == '1' and mark ~= '1' then redis.call('HSET', KEYS[1], 'retired', '1') end
if ARGV[6] == '' then redis.call('DEL', KEYS[2]) else redis.call('SET', KEYS[2], ARGV[6]) end
return {2}
"#;

/// A namespace's hash and its parks. KEYS: namespace, parks.
/// Returns `{fields, parks}` (`''`: none).
const NAMESPACE: &str = r#"
return {redis.call('HGETALL', KEYS[1]), redis.call('GET', KEYS[2]) or ''}
"#;

/// Creates a namespace if absent. KEYS: namespace, namespaces.
/// ARGV: bits, first, step, offset, watermark, name.
/// Returns `{1}` (created) or `{0, fields}` (present: its hash).
const ENSURE: &str = r#"
local existing = redis.call('HGETALL', KEYS[1])
if #existing > 0 then return {0, existing} end
redis.call('SADD', KEYS[2], ARGV[6])
redis.call('HSET', KEYS[1], 'bits', ARGV[1], 'first', ARGV[2], 'step', ARGV[3],
  'offset', ARGV[4], 'watermark', ARGV[5])
return {1}
"#;

/// Every namespace with its hash. KEYS: namespaces. ARGV: the namespace keys' prefix.
/// Returns `{name, fields, name, fields, …}`.
const LIST: &str = r#"
local out = {}
for _, name in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  out[#out + 1] = name
  out[#out + 1] = redis.call('HGETALL', ARGV[1] .. name)
end
return out
"#;

/// A lease group's hash, and per worker id with a record its live key's time left (`PTTL`:
/// -2 absent) and value. KEYS: group. ARGV: the live keys' prefix.
/// Returns `{fields, {worker, pttl, value, …}}`.
const GROUP: &str = r#"
local fields = redis.call('HGETALL', KEYS[1])
local live = {}
for i = 1, #fields, 2 do
  local w = string.match(fields[i], '^w:(%d+):token$')
  if w then
    local key = ARGV[1] .. w
    live[#live + 1] = w
    live[#live + 1] = redis.call('PTTL', key)
    live[#live + 1] = redis.call('GET', key) or ''
  end
end
return {fields, live}
"#;

/// An acquisition as [`crate::lease::plan_acquire`] decided it, if the group and the worker's
/// record are as read and its live key is absent (`SET NX PX`).
/// KEYS: group, live key, audit-seq, audit stream, audit-subjects.
/// ARGV: expected last token (`''`: no group), layout, worker, expected token, holder and floor
/// of the worker (`''`: no record), new token, new holder, floor to keep, TTL in ms, group name.
/// Returns 1 (acquired) or 0 (something changed: decide again).
const ACQUIRE: &str = r#"
local w = 'w:' .. ARGV[3] .. ':'
local last = redis.call('HGET', KEYS[1], 'last_token') or ''
local cur = redis.call('HMGET', KEYS[1], w .. 'token', w .. 'holder', w .. 'floor')
if last ~= ARGV[1] or (cur[1] or '') ~= ARGV[4] or (cur[2] or '') ~= ARGV[5]
  or (cur[3] or '') ~= ARGV[6] then return 0 end
if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
append(KEYS[3], KEYS[4], KEYS[5], ARGV[11], 'leased', ARGV[3], ARGV[7], ARGV[8])
redis.call('SET', KEYS[2], ARGV[7] .. ' ' .. ARGV[8], 'PX', ARGV[10])
redis.call('HSET', KEYS[1], 'layout', ARGV[2], 'last_token', ARGV[7], w .. 'token', ARGV[7],
  w .. 'holder', ARGV[8], w .. 'floor', ARGV[9])
return 1
"#;

/// A renewal or a release, if the worker's record is as read.
/// KEYS: group, live key. ARGV: worker, expected token, holder and floor, new floor,
/// `renew` or `release`, TTL in ms (renew).
/// Returns 1 (written) or 0 (the record changed: decide again).
const WORKER: &str = r#"
local w = 'w:' .. ARGV[1] .. ':'
local cur = redis.call('HMGET', KEYS[1], w .. 'token', w .. 'holder', w .. 'floor')
if cur[1] ~= ARGV[2] or cur[2] ~= ARGV[3] or cur[3] ~= ARGV[4] then return 0 end
redis.call('HSET', KEYS[1], w .. 'floor', ARGV[5])
if ARGV[6] == 'renew' then
  redis.call('SET', KEYS[2], ARGV[2] .. ' ' .. ARGV[3], 'PX', ARGV[7])
else
  redis.call('DEL', KEYS[2])
end
return 1
"#;

/// A subject's checkpoint and up to `limit` stream entries after `after`.
/// KEYS: checkpoint, stream. ARGV: after (`''`: from the start), limit.
/// Returns `{checkpoint fields, entries}`.
const ENTRIES: &str = r#"
local start = '-'
if ARGV[1] ~= '' then start = '(' .. ARGV[1] .. '-0' end
return {redis.call('HGETALL', KEYS[1]),
  redis.call('XRANGE', KEYS[2], start, '+', 'COUNT', ARGV[2])}
"#;

/// Pruning: entry `through` becomes the subject's checkpoint (its seq, time and holder kept),
/// and the stream entries up to it go. KEYS: checkpoint, stream. ARGV: through, event, a, b.
/// Returns how many entries were removed (the older checkpoint counts as one).
const FOLD: &str = r#"
local id = ARGV[1] .. '-0'
local found = redis.call('XRANGE', KEYS[2], id, id)
local old = redis.call('HGET', KEYS[1], 'seq')
if #found == 0 then
  if old == ARGV[1] then
    redis.call('HSET', KEYS[1], 'event', ARGV[2], 'a', ARGV[3], 'b', ARGV[4])
  end
  return 0
end
local fields = found[1][2]
local at, holder
for i = 1, #fields, 2 do
  if fields[i] == 'at' then at = fields[i + 1] end
  if fields[i] == 'holder' then holder = fields[i + 1] end
end
if not at or not holder then
  return redis.error_reply('audit entry ' .. id .. ' has no time or holder')
end
local removed = redis.call('XTRIM', KEYS[2], 'MINID', ARGV[1] .. '-1') - 1
if old then removed = removed + 1 end
redis.call('HSET', KEYS[1], 'seq', ARGV[1], 'at', at, 'event', ARGV[2], 'a', ARGV[3],
  'b', ARGV[4], 'holder', holder)
return removed
"#;

/// The scripts, loaded by SHA on first use (and again after a restart of the server).
#[derive(Debug)]
pub(super) struct Scripts {
    pub(super) advance: Script,
    pub(super) parks: Script,
    pub(super) namespace: Script,
    pub(super) ensure: Script,
    pub(super) list: Script,
    pub(super) group: Script,
    pub(super) acquire: Script,
    pub(super) worker: Script,
    pub(super) entries: Script,
    pub(super) fold: Script,
}

fn write(body: &str, with_append: bool) -> Script {
    let prelude = if with_append { APPEND } else { "" };
    Script::new(&format!("#!lua\n{prelude}{body}"))
}

fn read(body: &str) -> Script {
    Script::new(&format!("#!lua flags=no-writes\n{body}"))
}

impl Scripts {
    pub(super) fn new() -> Scripts {
        Scripts {
            advance: write(ADVANCE, true),
            parks: write(PARKS, true),
            namespace: read(NAMESPACE),
            ensure: write(ENSURE, false),
            list: read(LIST),
            group: read(GROUP),
            acquire: write(ACQUIRE, true),
            worker: write(WORKER, false),
            entries: read(ENTRIES),
            fold: write(FOLD, false),
        }
    }
}
