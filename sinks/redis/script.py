"""The Lua script that applies changes under the version guard, and the key layout it works on.

Layout, for pipeline (key prefix) ``shop`` and table ``public.orders``:

- ``shop:public.orders:<k1>:<k2>`` -- a string, the row's JSON (the DESIGN.md contract).
- ``shop:__pos:public.orders`` -- a hash, field ``<k1>:<k2>`` -> ``<pos>:<offset>``: the source
  position of the last change applied to the key, and the offset up to which its records are
  done (``%015d``). Deletes keep their field, so a replayed older create cannot bring a
  deleted row back.
- ``shop:__truncated:public.orders`` -- a string, the position of the table's last truncate: no
  change older than it is applied.
- ``shop:__offsets:<sink name>`` -- a hash, ``<topic>|<partition>`` -> next offset to read, written
  by the same script call as the batch's last changes.
- ``shop:__rebuild:<sink name>`` -- set when the script finds the offsets hash gone mid-run (Redis
  lost its data): the sink task rebuilds every table from the log at once (a sink opened
  meanwhile replays the whole log), and the first stored batch clears it.

A position is ``%020d%010d`` of ``(position, sequence)``: digits of one width, so Lua's string
comparison orders them exactly, past the 2^53 where Lua's doubles stop being exact.
"""

from __future__ import annotations

import orjson

from cdc.contracts.sink import SinkRecord
from cdc.log.base import TopicPartition
from sinks.keyed import Pos, Table
from sinks.offsets import encode_offsets

# One script, three modes (ARGV[1]), so there is one SHA to load and to reload on NOSCRIPT.
#
# apply: ttl_ms, offsets_key, rebuild_key, expect_offsets, n, <n offsets args>, t,
#        <t x (value prefix, pos hash, truncated key)>, then the changes as one JSON array of
#        [op, table#, field, pos, offset, extra] (one argument, not six a change: encoding
#        arguments one by one was most of the client's time); extra is the row's JSON for
#        a set, offset + 1 for a delete.
#        op: s (set), d (delete), x (tombstone). Returns how many changes were applied.
# trunc: value prefix, pos hash, pos, fields...: deletes the rows older than pos.
# floor: truncated key, pos: raises the table's truncate position.
LUA = r"""
local function split(mark)
  local c = string.find(mark, ':', 1, true)
  return string.sub(mark, 1, c - 1), string.sub(mark, c + 1)
end

local mode = ARGV[1]
if mode == 'trunc' then
  local n = 0
  for i = 5, #ARGV do
    local mark = redis.call('HGET', ARGV[3], ARGV[i])
    if not mark or split(mark) < ARGV[4] then
      redis.call('DEL', ARGV[2] .. ARGV[i])
      redis.call('HDEL', ARGV[3], ARGV[i])
      n = n + 1
    end
  end
  return n
elseif mode == 'floor' then
  local current = redis.call('GET', ARGV[2]) or ''
  if ARGV[3] > current then redis.call('SET', ARGV[2], ARGV[3]) end
  return 0
end

local ttl = tonumber(ARGV[2])
local offsets_key, rebuild_key = ARGV[3], ARGV[4]
-- The offsets hash only vanishes with the data (a restart without persistence, a FLUSHALL):
-- applying more would hide the loss, so stop, and mark the store for a rebuild from the log.
if ARGV[5] == '1' and redis.call('EXISTS', offsets_key) == 0 then
  redis.call('SET', rebuild_key, '1')
  return redis.error_reply('CDCLOST ' .. offsets_key .. ' is gone: Redis lost the sink data')
end
local n_off = tonumber(ARGV[6])
local i = 7 + n_off
local tables = {}
for t = 1, tonumber(ARGV[i]) do
  local b = i + (t - 1) * 3
  tables[t] = {rows = ARGV[b + 1], pos = ARGV[b + 2], floor = redis.call('GET', ARGV[b + 3]) or '',
               spos = {}, soff = {}, fields = {}, values = {}, marks = {}}
end
local changes = cjson.decode(ARGV[i + 1 + #tables * 3])

-- Redis calls dominate a script's time: read the marks with one HMGET a table, keep them in
-- Lua while deciding, then write rows and marks with a few variadic calls.
for _, c in ipairs(changes) do
  local f = tables[c[2]].fields
  f[#f + 1] = c[3]
end
for _, t in ipairs(tables) do
  if #t.fields > 0 then
    local got = redis.call('HMGET', t.pos, unpack(t.fields))
    for k = 1, #t.fields do
      if got[k] then t.spos[t.fields[k]], t.soff[t.fields[k]] = split(got[k]) end
    end
  end
end

local function mark(t, field, pos, off)
  t.spos[field], t.soff[field] = pos, off
  local m = t.marks
  m[#m + 1] = field
  m[#m + 1] = pos .. ':' .. off  -- a repeated field: HSET keeps the last
end

-- Positions and offsets are fixed-width digit strings: compared as strings, no numbers.
local applied = 0
for _, c in ipairs(changes) do
  local op, t, field, pos, off = c[1], tables[c[2]], c[3], c[4], c[5]
  local spos, soff = t.spos[field] or '', t.soff[field] or ''
  if op == 'x' then
    -- A tombstone has no position: it deletes only when nothing at or after it was applied.
    if off > soff then
      t.values[field] = false
      mark(t, field, spos, off)
      applied = applied + 1
    end
  elseif pos > spos and pos > t.floor then
    if op == 's' then
      t.values[field] = c[6]
      mark(t, field, pos, off)
    else
      t.values[field] = false
      -- c[6] is offset + 1: the delete's own tombstone follows it and must change nothing.
      mark(t, field, pos, c[6])
    end
    applied = applied + 1
  elseif op == 'd' and c[6] > soff then
    mark(t, field, spos, c[6])
  end
end

for _, t in ipairs(tables) do
  local sets, dels = {}, {}
  for field, value in pairs(t.values) do
    if not value then
      dels[#dels + 1] = t.rows .. field
    elseif ttl > 0 then
      redis.call('SET', t.rows .. field, value, 'PX', ttl)
    else
      sets[#sets + 1] = t.rows .. field
      sets[#sets + 1] = value
    end
  end
  if #sets > 0 then redis.call('MSET', unpack(sets)) end
  if #dels > 0 then redis.call('DEL', unpack(dels)) end
  if #t.marks > 0 then redis.call('HSET', t.pos, unpack(t.marks)) end
end
if n_off > 0 then
  redis.call('HSET', offsets_key, unpack(ARGV, 7, 6 + n_off))
  redis.call('DEL', rebuild_key)
end
return applied
"""


def encode_pos(pos: Pos | None) -> str:
    """Fixed-width digits, ordered as ``(position, sequence)`` is."""
    return "" if pos is None else f"{pos[0]:020d}{pos[1]:010d}"


class Layout:
    """Key names of one pipeline (key prefix) in Redis."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def rows(self, table: Table) -> str:
        """Prefix of the table's row keys; a row key is this plus the key suffix."""
        return f"{self.prefix}:{table[0]}.{table[1]}:"

    def positions(self, table: Table) -> str:
        return f"{self.prefix}:__pos:{table[0]}.{table[1]}"

    def truncated(self, table: Table) -> str:
        return f"{self.prefix}:__truncated:{table[0]}.{table[1]}"

    def offsets(self, sink_name: str) -> str:
        return f"{self.prefix}:__offsets:{sink_name}"

    def rebuild(self, sink_name: str) -> str:
        return f"{self.prefix}:__rebuild:{sink_name}"


Entry = tuple[str, int, str, str, str, str]


class Chunk:
    """The changes of one ``apply`` call: entries ``(op, table#, field, pos, offset, extra)``
    (see the script) and the tables they name, numbered from 1 in order of first use."""

    __slots__ = ("entries", "tables")

    def __init__(self) -> None:
        self.tables: dict[Table, int] = {}
        self.entries: list[Entry] = []

    def args(
        self,
        layout: Layout,
        ttl_ms: int,
        sink_keys: tuple[str, str],
        expect: bool,
        offsets: list[str],
    ) -> list[str | bytes]:
        """``sink_keys``: the offsets hash and the rebuild marker."""
        head: list[str | bytes] = ["apply", str(ttl_ms), *sink_keys, "1" if expect else "0"]
        head += [str(len(offsets)), *offsets, str(len(self.tables))]
        for table in self.tables:
            head += (layout.rows(table), layout.positions(table), layout.truncated(table))
        head.append(orjson.dumps(self.entries))
        return head


def offsets_args(records: list[SinkRecord]) -> list[str]:
    """``HSET`` arguments storing the next offset per partition after ``records``."""
    latest: dict[tuple[str, int], int] = {}
    for record in records:  # a plain tuple per record, as the rest of this path
        latest[record.topic, record.partition] = record.offset + 1
    stored = encode_offsets({TopicPartition(*tp): offset for tp, offset in latest.items()})
    return [part for field, offset in stored.items() for part in (field, str(offset))]
