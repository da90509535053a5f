/* SPDX-License-Identifier: BSD-3-Clause */
/* scripts.c -- the Lua scripts of the agent, their keys, arguments and
 * replies, as one table (scripts.h). */
#include "scripts.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlock.h"

/* The lock key's value is the holder record, "TOKEN HOST PID UID COMM"
 * (docs/protocol.md): who holds it, for operators, without a key of its
 * own. The other scripts are given the token alone: LUA_OURS says whether
 * a value is the record of that token. (A value equal to the token is
 * ours too: the form of earlier versions.) The value is read with pcall: a
 * key of another type (a hash, a list) is someone else's, not ours, never
 * an error reply, which would cost a holder its lease or a waiter its
 * place. (Acquire's SET NX fails on a key of any type: taken.)
 *
 * Acquire: SET NX PX, and on success the fencing token: one more than the
 * high-water mark of the lock key's hash slot (KEYS[2], shared by every name
 * of the slot, kept without expiry), but never below the server's clock in
 * microseconds, so that it keeps rising after the mark was lost. In quorum
 * mode the floor is the agent's clock (ARGV[3]) rather than the server's, so
 * that the nodes usually agree on the token. The mark is read with pcall: a
 * foreign value of another type must not abort the script after SET NX took
 * the lock; and only a whole number in [0, 2^53) counts, the range Lua's
 * doubles hold exactly (our tokens, microseconds since 1970, are far below
 * it): anything else (1e30, inf, a fraction) reads as 0 (mark_of()), or the
 * token would leave the range of a 64-bit reply. When taken: the holder's
 * remaining PTTL, negated. The token goes through string.format: Lua's own
 * number-to-string conversion keeps only 14 digits. */
#define LUA_MARK_OF                                                                                \
    "local function mark_of(v) local n = tonumber(v) "                                             \
    "if type(n) == 'number' and n >= 0 and n < 9007199254740992 and n % 1 == 0 "                   \
    "then return n end return 0 end "
#define LUA_MARK LUA_MARK_OF "local function mark(k) return mark_of(redis.pcall('get', k)) end "
#define LUA_OURS                                                                                   \
    "local v = redis.pcall('get', KEYS[1]) if type(v) ~= 'string' then v = false end "             \
    "local ours = v == ARGV[1] or (v and string.sub(v, 1, 33) == ARGV[1] .. ' ') "
/* The waiting-hosts record (KEYS[3] of the acquires): a hash of agent id ->
 * "SINCE EXPIRES", server times, SINCE in microseconds (in ms from earlier
 * versions, told apart by size: us_of()), EXPIRES in ms; or, for an entry
 * bound to its agent's keep-alive key, "SINCE EXPIRES KEY". queue_turn()
 * drops the entries that are not live and returns the id of the oldest live
 * entry of another agent when it is older than the caller's (ARGV[5]), else
 * nil; entries are ordered by SINCE, then by agent id, so that every host
 * agrees on which goes first. With skipf, the entries of the agents in the
 * set that skipf() returns do not count (a reader does not wait for
 * readers). join() adds or refreshes the caller's entry, keeping its SINCE,
 * for ARGV[6] ms: a number (0: a try-once acquire, which does not join),
 * then, for a bound entry, a space and the caller's keep-alive key.
 *
 * An entry is live while EXPIRES is ahead and not further ahead than its
 * bound: BACKEND_WAIT_ENTRY_MAX_MS for an entry of its own, which its agent
 * refreshes by an acquire; BACKEND_WAIT_BOUND_MAX_MS for a bound one, which
 * besides counts only while its KEY exists (live() reads each key once per
 * script). The agent sets that key to expire BACKEND_WAIT_ENTRY_MAX_MS
 * ahead, again and again while it lives (one SET for all its names), so a
 * dead agent's bound entries stop counting as soon as its own entries would
 * have, and a live agent's bound entry whose removal was lost still lapses
 * at its EXPIRES. join() writes no longer entry and queue_turn() drops one
 * that claims more, so that no agent's setting (nor an earlier version's)
 * makes the other hosts wait long for an agent that died. The key of a
 * bound entry is read without being named in KEYS: outside Redis Cluster
 * only (quorum mode neither binds entries). */
#define STRINGIFY(x)   #x
#define STRING_OF(x)   STRINGIFY(x)
#define WAIT_ENTRY_MAX STRING_OF(BACKEND_WAIT_ENTRY_MAX_MS)
#define WAIT_BOUND_MAX STRING_OF(BACKEND_WAIT_BOUND_MAX_MS)
/* clock() is the server's time in us, read once, and only by the paths
 * that need it (LUA_TIME_US: of TIME's reply, t). */
#define LUA_TIME_US "tonumber(t[1]) * 1000000 + tonumber(t[2])"
#define LUA_CLOCK                                                                                  \
    "local us local function clock() if not us then local t = redis.call('time') "                 \
    "us = " LUA_TIME_US " end return us end "
/* LUA_ENTRY reads the entries of the record (and the readers' marks), as
 * of clock() (LUA_CLOCK, before it): expiry(v, now) is an entry's (the
 * part of its value after SINCE) or a mark's EXPIRES while it is live,
 * else nil, and for a bound entry its KEY besides, and for an entry that
 * carries a grant (grant on release, below) its TTL, BLOCK and VALUE too.
 * KEY is two words (keepalive_key(): the prefix has no space); VALUE, the
 * holder record, has spaces: it goes last. */
#define LUA_ENTRY                                                                                  \
    "local alive = {} local function live(k) if alive[k] == nil then "                             \
    "alive[k] = redis.call('exists', k) == 1 end return alive[k] end "                             \
    "local function expiry(v, now) local e, rest = string.match(v, '^(%d+)(.*)$') "                \
    "e = tonumber(e) if not e or e <= now then return nil end "                                    \
    "if rest == '' then if e > now + " WAIT_ENTRY_MAX " then return nil end return e end "         \
    "local k, ttl, block, val = string.match(rest, '^ (%S+ %S+) (%d+) (%d+) (.+)$') "              \
    "if not k then k = string.match(rest, '^ (.+)$') end "                                         \
    "if not k or e > now + " WAIT_BOUND_MAX " or not live(k) then return nil end "                 \
    "return e, k, tonumber(ttl), tonumber(block), val end "                                        \
    "local function us_of(v) local n = tonumber(v) if n and n < 1e14 then n = n * 1000 end "       \
    "return n end "
/* An exclusive acquire of dlock's own format sets carry (its TTL, block and
 * value: "TTL BLOCK VALUE") before it joins: a bound entry of it carries
 * what a release needs to hand the key over (docs/redis.md, "Grant on
 * release"). */
#define LUA_QUEUE                                                                                  \
    LUA_ENTRY                                                                                      \
    "local me, queued, carry = ARGV[5], false, nil "                                               \
    "local want_ms, ka = string.match(ARGV[6], '^(%d+) ?(.*)$') "                                  \
    "want_ms = tonumber(want_ms) or 0 if ka == '' then ka = nil end "                              \
    "if ka then want_ms = math.min(want_ms, " WAIT_BOUND_MAX ") "                                  \
    "else want_ms = math.min(want_ms, " WAIT_ENTRY_MAX ") end "                                    \
    "local function queue_turn(skipf) if redis.call('exists', KEYS[3]) == 0 then return nil end "  \
    "queued = true local skip = skipf and skipf() or {} "                                          \
    "local now = math.floor(clock() / 1000) local all = redis.call('hgetall', KEYS[3]) "           \
    "local first, first_since for i = 1, #all, 2 do "                                              \
    "local since, rest = string.match(all[i + 1], '^(%d+) (.*)$') "                                \
    "since = us_of(since) "                                                                        \
    "if not since or not expiry(rest, now) then "                                                  \
    "redis.call('hdel', KEYS[3], all[i]) "                                                         \
    "elseif all[i] ~= me and not skip[all[i]] and (not first or since < first_since or "           \
    "(since == first_since and all[i] < first)) then "                                             \
    "first, first_since = all[i], since end end "                                                  \
    "if first then local mine = redis.call('hget', KEYS[3], me) "                                  \
    "if mine then local t = us_of(string.match(mine, '^(%d+)')) "                                  \
    "if t and (t < first_since or (t == first_since and me < first)) then return nil end end "     \
    "end "                                                                                         \
    "return first end "                                                                            \
    "local function bound(e) if ka then return e .. ' ' .. ka end return e end "                   \
    "local function join() local want = want_ms if want <= 0 then return end "                     \
    "local now = math.floor(clock() / 1000) "                                                      \
    "local mine = redis.call('hget', KEYS[3], me) "                                                \
    "local since = mine and string.match(mine, '^(%d+) ') or string.format('%d', clock()) "        \
    "local e = bound(string.format('%d', now + want)) "                                            \
    "if ka and carry then e = e .. ' ' .. carry end "                                              \
    "redis.call('hset', KEYS[3], me, since .. ' ' .. e) "                                          \
    "if redis.call('pttl', KEYS[3]) < want then redis.call('pexpire', KEYS[3], want) end end "
/* The readers' marks (KEYS[4] of the acquires): a hash of agent id ->
 * EXPIRES (server time in ms), or "EXPIRES KEY" bound to the agent's
 * keep-alive key as its entry is, one for each agent whose entry in the
 * waiting-hosts record waits for the shared side of a read-write lock. An
 * entry without a live mark is a writer's (an exclusive acquire's, a
 * semaphore's, or an earlier version's, which knows no marks): the marks
 * are beside the record. readers() is the set of agents with a live mark
 * (live as an entry is: expiry()); join_as() joins the record and marks the
 * caller's entry as a reader's, or clears its mark. */
#define LUA_READERS_OF                                                                             \
    "local function readers() local r, now = {}, math.floor(clock() / 1000) "                      \
    "local all = redis.call('hgetall', KEYS[4]) for i = 1, #all, 2 do "                            \
    "if expiry(all[i + 1], now) then r[all[i]] = true end end "                                    \
    "return r end "
#define LUA_READERS                                                                                \
    LUA_READERS_OF                                                                                 \
    "local function join_as(reader) join() "                                                       \
    "local want = want_ms if want <= 0 then return end "                                           \
    "if not reader then redis.call('hdel', KEYS[4], me) return end "                               \
    "redis.call('hset', KEYS[4], me, bound(string.format('%d', math.floor(clock() / 1000) + "      \
    "want))) "                                                                                     \
    "if redis.call('pttl', KEYS[4]) < want then redis.call('pexpire', KEYS[4], want) end end "
/* LUA_RAISE (on the caller's locals fence, mk and block): the token,
 * fence (its floor when it starts), above the mark mk, which goes up to
 * the token plus block. The mark is written and read in one command (SET
 * with GET: the floor is usually above it, the mark being an earlier token
 * plus its block) and written again when it was at or above the floor.
 * When SET with GET fails (with pcall: no error), the mark is read with
 * GET and then written, as before SET had GET: a value of another type
 * reads as 0 and is overwritten, and a server that knows no GET option
 * still makes tokens above the mark.
 * grant_fence(): the fencing token of a grant, as the comment at the top
 * says: ARGV[3] (the floor) or the server's clock, raised above the slot's
 * mark (KEYS[2]) with the block ARGV[4]; fence_of() the same of a mark key,
 * a floor (nil: the clock) and a block of one's choosing (the release's
 * grant). */
#define LUA_RAISE                                                                                  \
    "block = tonumber(block) "                                                                     \
    "local base = fence "                                                                          \
    "local last = redis.pcall('set', mk, string.format('%d', base + block), 'GET') "               \
    "local failed = type(last) == 'table' if failed then last = redis.pcall('get', mk) end "       \
    "last = mark_of(last) if last >= fence then fence = last + 1 end "                             \
    "if failed or fence ~= base then redis.call('set', mk, string.format('%d', fence + block)) "   \
    "end "
#define LUA_GRANT                                                                                  \
    "local function fence_of(mk, floor, block) local fence = tonumber(floor) "                     \
    "if not fence then fence = clock() end " LUA_RAISE "return fence end "                         \
    "local function grant_fence() return fence_of(KEYS[2], ARGV[3], ARGV[4]) end "
/* Acquire: another host's turn (the oldest entry of the waiting-hosts
 * record is not ours) counts as taken, with no PTTL (0); else SET NX PX
 * of the value (ARGV[1]) for ARGV[2] ms, and on success leave the
 * record and make the token (ARGV[3]: the floor, see above). A waiting
 * caller that did not get the lock joins the record, as a writer (its
 * reader's mark goes), its bound entry carrying what a release needs to
 * grant it the key (carry). A counted key (a hash) fails SET NX like any
 * key: taken. The slot's mark is raised to the token plus ARGV[4]: the
 * tokens in between are the agent's to hand over.
 *
 * Adoption: a key that already holds our token (ARGV[1]'s first 32
 * characters) was granted to our entry by a release whose message the
 * agent did not use: it is ours from now, for ARGV[2] ms (the value as
 * ARGV[1] says), the caller leaves the record, and the grant gets a new
 * token from grant_fence(), above the release's (fences need only rise
 * from one holder to the next).
 *
 * When nobody waits (no record: the common case), SET NX goes first and
 * the token is made inline: the key is read for adoption only when SET NX
 * fails (a key holding our token fails it), and the helpers of the other
 * paths, closures made anew by every call that reaches them, come after.
 * With a record, the order is adoption, turn, SET NX. */
static const char lua_acquire[] =
    LUA_MARK_OF "local waiting = redis.call('exists', KEYS[3]) == 1 "
                "if not waiting and redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then "
                "local fence, mk, block = tonumber(ARGV[3]), KEYS[2], ARGV[4] "
                "if not fence then local t = redis.call('time') fence = " LUA_TIME_US
                " end " LUA_RAISE "return fence end " LUA_CLOCK LUA_GRANT LUA_QUEUE LUA_READERS
                "local tok = string.sub(ARGV[1], 1, 32) local v = redis.pcall('get', KEYS[1]) "
                "if type(v) == 'string' and (v == tok or string.sub(v, 1, 33) == tok .. ' ') "
                "then "
                "redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2]) "
                "redis.call('hdel', KEYS[3], me) redis.call('hdel', KEYS[4], me) "
                "return grant_fence() end "
                "carry = ARGV[2] .. ' ' .. ARGV[4] .. ' ' .. ARGV[1] "
                "if waiting then if queue_turn() then join_as(false) return 0 end "
                "if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then "
                "if queued then redis.call('hdel', KEYS[3], me) end "
                "return grant_fence() end end "
                "join_as(false) local t = redis.call('pttl', KEYS[1]) if t < 0 then t = 0 end "
                "return -t";

/* Renew: compare-and-pexpire. */
static const char lua_renew[] =
    LUA_OURS "if ours then return redis.call('pexpire', KEYS[1], ARGV[2]) end return 0";

/* Release: compare-and-delete, then tell the agents waiting for the
 * name on its own channel (ARGV[2], with sharded pub/sub when ARGV[4] is
 * 's') when some wait (the waiting-hosts record, KEYS[2], exists; on
 * Redis Cluster, where it is not named, always) and there is a channel
 * (none for the clean-up after an acquire that missed). The slot's
 * high-water mark stays. */
#define LUA_NOTICE_SEND                                                                            \
    "if ARGV[4] == 's' then redis.call('spublish', ARGV[2], ARGV[3]) "                             \
    "else redis.call('publish', ARGV[2], ARGV[3]) end "
#define LUA_NOTICE                                                                                 \
    "if ARGV[2] ~= '' and (not KEYS[2] or redis.call('exists', KEYS[2]) == 1) "                    \
    "then " LUA_NOTICE_SEND "end "
/* Grant on release (docs/redis.md): after the compare-and-delete of an
 * exclusive key of dlock's format, outside Redis Cluster (KEYS[3], the
 * slot's mark, and KEYS[4], the readers' marks, are named then), with a
 * channel, the key goes at once to the oldest live entry of the record
 * (ordered as queue_turn() orders them, the entries that are not live
 * dropped) when that entry can take it: it carries a grant (TTL, BLOCK,
 * VALUE: an exclusive acquire of a bound entry wrote it), it is no
 * reader's (no live mark), and its agent's keep-alive key has a TTL. The
 * key is SET to VALUE for the TTL or the keep-alive key's PTTL, whichever
 * is less, so that it never outlives the agent's last keep-alive by more
 * than BACKEND_WAIT_ENTRY_MAX_MS; the token is fence_of() the slot's mark
 * above the server's clock, with the entry's BLOCK; the entry (and its
 * mark) leaves; and the grant message goes on the channel instead of the
 * notice: "grant ID TOKEN FENCE SEQ TTL BLOCK", SEQ the keep-alive key's
 * value. (An earlier agent reads the message as a name, which no name is:
 * it wakes nobody, and the name is taken anyway.) */
#define LUA_HANDOVER                                                                               \
    "local function handover(all) local now = math.floor(clock() / 1000) "                         \
    "local rd = readers() local first, fs, fe "                                                    \
    "for i = 1, #all, 2 do local since, rest = string.match(all[i + 1], '^(%d+) (.*)$') "          \
    "since = us_of(since) local e = since and {expiry(rest, now)} "                                \
    "if not since or not e[1] then redis.call('hdel', KEYS[2], all[i]) "                           \
    "elseif not first or since < fs or (since == fs and all[i] < first) then "                     \
    "first, fs, fe = all[i], since, e end end "                                                    \
    "if not first or rd[first] or not fe[3] then return nil end "                                  \
    "local pt = redis.call('pttl', fe[2]) if pt <= 0 then return nil end "                         \
    "local seq = redis.pcall('get', fe[2]) if type(seq) ~= 'string' then return nil end "          \
    "local px = math.min(fe[3], pt) if px <= 0 then return nil end "                               \
    "redis.call('set', KEYS[1], fe[5], 'PX', px) "                                                 \
    "local fence = fence_of(KEYS[3], nil, fe[4]) "                                                 \
    "redis.call('hdel', KEYS[2], first) redis.call('hdel', KEYS[4], first) "                       \
    "return 'grant ' .. first .. ' ' .. string.sub(fe[5], 1, 32) .. ' ' .. "                       \
    "string.format('%d', fence) .. ' ' .. seq .. ' ' .. string.format('%d', fe[3]) .. ' ' .. "     \
    "string.format('%d', fe[4]) end "
/* A released token is spent, the key its or not (a withdraw after an
 * acquire that failed): an entry that carries it (its agent's, whose
 * removal may have been lost) leaves, so that no release hands a key to a
 * token its agent no longer takes. The record is read once, into left,
 * for this and for handover(): left is what remains of it after. */
#define LUA_SPENT                                                                                  \
    "local left = redis.call('hgetall', KEYS[2]) if KEYS[4] then local kept = {} "                 \
    "for i = 1, #left, 2 do "                                                                      \
    "if string.match(left[i + 1], '^%d+ %d+ %S+ %S+ %d+ %d+ (%x+)') == ARGV[1] then "              \
    "redis.call('hdel', KEYS[2], left[i]) redis.call('hdel', KEYS[4], left[i]) "                   \
    "else kept[#kept + 1] = left[i] kept[#kept + 1] = left[i + 1] end end left = kept end "
/* The release looks for the record once: with none (nobody waits: the
 * common case), it is the compare-and-delete alone, and the notice on Redis
 * Cluster, where the record is not named; the helpers of the grant come
 * after. With a record, the notice goes when the record remains after the
 * spent entries and handover() left it (none, when it is gone). */
static const char lua_release[] = LUA_OURS
    "local waiting = KEYS[2] and redis.call('exists', KEYS[2]) == 1 "
    "if not waiting then if not ours then return 0 end redis.call('del', KEYS[1]) "
    "if ARGV[2] ~= '' and not KEYS[2] then " LUA_NOTICE_SEND
    "end return 1 end " LUA_MARK LUA_CLOCK LUA_ENTRY LUA_READERS_OF LUA_GRANT LUA_HANDOVER LUA_SPENT
    "if not ours then return 0 end redis.call('del', KEYS[1]) "
    "if ARGV[2] == '' or #left == 0 then return 1 end "
    "if KEYS[4] then local g = handover(left) "
    "if g then redis.call('publish', ARGV[2], g) return 1 end end " LUA_NOTICE "return 1";

/* Fence (quorum mode): while the key is ours, raise the slot's
 * high-water mark to the grant's token. */
static const char lua_fence[] =
    LUA_MARK LUA_OURS "if not ours then return 0 end "
                      "if mark(KEYS[2]) < tonumber(ARGV[2]) then "
                      "redis.call('set', KEYS[2], ARGV[2]) end return 1";

/* Lookup (for operators): the token, the holder record, the PTTL. The
 * record is the value when it starts with a token (32 lowercase hex
 * characters and a space; any other value is a foreign client's, shown
 * whole); a separate record key is read too, for keys of earlier
 * versions. A value of another type than string reads as empty, but a
 * counted key's hash: then {'', '', PTTL, KIND, N, and for each of the
 * first PERMITS_SHOWN live permits of the N: TOKEN, its PTTL, HOLDER}; and
 * any other hash, Redisson's format: the same with KIND "redisson" (or
 * "redisson:MODE" for its read-write lock's), and for each holder field:
 * the field, the key's PTTL, the hold count. */
#define PERMITS_SHOWN STRING_OF(SCRIPT_PERMITS_SHOWN)
#define LUA_LOOKUP                                                                                 \
    "local k = redis.pcall('hget', KEYS[1], '" SCRIPT_KIND_FIELD "') "                             \
    "if type(k) == 'string' then local t = redis.call('time') "                                    \
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) "                       \
    "local out, n = {'', '', redis.call('pttl', KEYS[1]), k, 0}, 0 "                               \
    "local all = redis.call('hgetall', KEYS[1]) for i = 1, #all, 2 do "                            \
    "local e, rest = string.match(all[i + 1], '^(%d+) ?(.*)$') e = tonumber(e) "                   \
    "if all[i] ~= '" SCRIPT_KIND_FIELD "' and e and e > now then n = n + 1 "                       \
    "if n <= " PERMITS_SHOWN " then out[#out + 1] = all[i] out[#out + 1] = e - now "               \
    "out[#out + 1] = rest end end end out[5] = n return out end "                                  \
    "local all = k == false and redis.pcall('hgetall', KEYS[1]) "                                  \
    "if type(all) == 'table' and not all.err and #all > 0 then "                                   \
    "local mode = redis.call('hget', KEYS[1], 'mode') local p = redis.call('pttl', KEYS[1]) "      \
    "local out, n = {'', '', p, mode and ('redisson:' .. mode) or 'redisson', 0}, 0 "              \
    "for i = 1, #all, 2 do "                                                                       \
    "if all[i] ~= 'mode' then n = n + 1 if n <= " PERMITS_SHOWN " then "                           \
    "out[#out + 1] = all[i] out[#out + 1] = p out[#out + 1] = all[i + 1] end end end "             \
    "out[5] = n return out end "                                                                   \
    "local v = redis.pcall('get', KEYS[1]) local h = redis.pcall('get', KEYS[2]) "                 \
    "if type(v) ~= 'string' then v = '' end if type(h) ~= 'string' then h = '' end "               \
    "local _, e = string.find(v, '^[0-9a-f]+ ') "                                                  \
    "if h == '' and e == 33 then h = v v = string.sub(v, 1, 32) end "                              \
    "return {v, h, redis.call('pttl', KEYS[1])}"
static const char lua_lookup[] = LUA_LOOKUP;

/* Force (an operator's forced release, whoever holds the key): the
 * lookup's answer, then the lock key and the holder record of earlier
 * versions (KEYS[2], not named on Redis Cluster) deleted; the release notice goes on the name's
 * channel (ARGV[1], empty: none; ARGV[2] the name, ARGV[3] "s" for SPUBLISH) when hosts wait (the
 * waiting-hosts record, KEYS[3], exists; on Redis Cluster, where it is not named, always). The
 * waiting-hosts record and the slot's fencing mark stay: the next grant's token is still above
 * every earlier one. */
static const char lua_force[] =
    "local function look() " LUA_LOOKUP " end local out = look() "
    "if redis.call('exists', KEYS[1]) == 1 then redis.call('del', KEYS[1]) "
    "if ARGV[1] ~= '' and (not KEYS[3] or redis.call('exists', KEYS[3]) == 1) then "
    "if ARGV[3] == 's' then redis.call('spublish', ARGV[1], ARGV[2]) "
    "else redis.call('publish', ARGV[1], ARGV[2]) end end end "
    "if KEYS[2] then redis.call('del', KEYS[2]) end return out";

/* ---- the counted kinds ----
 *
 * The lock key is a hash: SCRIPT_KIND_FIELD -> the kind ("shared", or
 * "sem:N" with N permits), and one field per live permit, its token -> its
 * "EXPIRES HOLDER": EXPIRES the server time in ms at which it lapses (a
 * hash field has no TTL of its own in Redis 7.0), HOLDER the holder record
 * after the token ("HOST PID UID COMMAND"). Every script drops the lapsed
 * permits it sees (permits()) and sets the key's TTL to the latest live
 * permit's expiry, or deletes the key when none is left (settle()): the key
 * goes by itself when its last holder does. The kind field is read with
 * pcall: a key of another type (the exclusive kind's string, a foreign
 * client's anything) is someone else's. */
#define LUA_NOW                                                                                    \
    "local t = redis.call('time') "                                                                \
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) "
/* permits(keep): drops the lapsed permits; returns how many live permits
 * other than keep's there are, the latest expiry of them all (keep's too;
 * 0: none) and the earliest of the others'. */
#define LUA_PERMITS                                                                                \
    "local function permits(keep) local n, last, soon = 0, 0, nil "                                \
    "local all = redis.call('hgetall', KEYS[1]) for i = 1, #all, 2 do "                            \
    "if all[i] ~= '" SCRIPT_KIND_FIELD "' then "                                                   \
    "local e = tonumber(string.match(all[i + 1], '^(%d+)')) "                                      \
    "if not e or e <= now then redis.call('hdel', KEYS[1], all[i]) else "                          \
    "if e > last then last = e end "                                                               \
    "if all[i] ~= keep then n = n + 1 if not soon or e < soon then soon = e end end "              \
    "end end end return n, last, soon end "                                                        \
    "local function settle(last) if last == 0 then redis.call('del', KEYS[1]) "                    \
    "else redis.call('pexpire', KEYS[1], last - now) end end "
/* The caller's permit (ARGV[1]): its expiry, and the rest of its value
 * (" HOLDER"); nil when the key has none (or is no hash). */
#define LUA_MINE                                                                                   \
    "local v = redis.pcall('hget', KEYS[1], ARGV[1]) local exp, rest "                             \
    "if type(v) == 'string' then exp, rest = string.match(v, '^(%d+)(.*)$') "                      \
    "exp = tonumber(exp) end "

/* Acquire a permit: KEYS as the exclusive acquire's (the lock, the slot's
 * mark, the waiting-hosts record, the readers' marks); ARGV[1] the token,
 * ARGV[2] the TTL, ARGV[3] to ARGV[6] as the exclusive acquire's, ARGV[7]
 * the kind, ARGV[8] the holder record. A key of another type, or a hash
 * without the kind field, is taken (its PTTL); a counted key of another
 * kind answers that kind (nothing joined: the acquire can never succeed as
 * asked). Then the turn: a semaphore's acquire waits for every older entry
 * of the record, as the exclusive acquire does; a shared one only for the
 * writers' (the entries without a reader's mark), so that once a writer
 * waits, no reader that came after it goes first, and the readers that
 * came before it do (taken, with no PTTL). Then the limit: at N live
 * permits, taken with the PTTL of the permit that lapses first. A waiting
 * caller that gets no permit joins the record, marked as a reader's for
 * the shared kind. Else the permit (for ARGV[2] ms from now), and the
 * fencing token as the exclusive acquire makes it, from the same mark. */
static const char lua_acquire_counted[] =
    LUA_MARK LUA_CLOCK LUA_GRANT LUA_QUEUE LUA_READERS LUA_NOW LUA_PERMITS
    "local kind = ARGV[7] local shared = kind == 'shared' "
    "local limit = tonumber(string.match(kind, '^sem:(%d+)$')) "
    "local held = redis.pcall('hget', KEYS[1], '" SCRIPT_KIND_FIELD "') local n, last, soon = 0, 0 "
    "if type(held) == 'string' then n, last, soon = permits(ARGV[1]) "
    "if last == 0 then redis.call('del', KEYS[1]) elseif held ~= kind then return held end "
    "elseif held or redis.call('exists', KEYS[1]) == 1 then join_as(shared) "
    "local p = redis.call('pttl', KEYS[1]) if p < 0 then p = 0 end return -p end "
    "if queue_turn(shared and readers or nil) then join_as(shared) return 0 end "
    "if limit and n >= limit then join_as(shared) return soon and now - soon or 0 end "
    "local exp = now + tonumber(ARGV[2]) if exp > last then last = exp end "
    "redis.call('hset', KEYS[1], '" SCRIPT_KIND_FIELD "', kind, ARGV[1], "
    "string.format('%d', exp) .. ' ' .. ARGV[8]) "
    "redis.call('pexpire', KEYS[1], last - now) "
    "if queued then redis.call('hdel', KEYS[3], me) end redis.call('hdel', KEYS[4], me) "
    "return grant_fence()";

/* Renew a permit (ARGV[1]) to ARGV[2] ms from now while it is live; the
 * key's TTL follows the latest permit. A lapsed permit is not ours any
 * more: dropped, and not renewed. */
static const char lua_renew_counted[] = LUA_NOW LUA_PERMITS LUA_MINE
    "if not exp then return 0 end "
    "if exp > now then redis.call('hset', KEYS[1], ARGV[1], "
    "string.format('%d', math.max(exp, now + tonumber(ARGV[2]))) .. rest) end "
    "local _, last = permits(nil) settle(last) if exp > now then return 1 end return 0";

/* Release a permit (ARGV[1]); the key goes with its last live permit, and
 * the release notice as the exclusive release's (KEYS and ARGV[2..4] as
 * its) when the permit was live. */
static const char lua_release_counted[] = LUA_NOW LUA_PERMITS LUA_MINE
    "if not exp then return 0 end "
    "redis.call('hdel', KEYS[1], ARGV[1]) local _, last = permits(nil) settle(last) "
    "if exp <= now then return 0 end " LUA_NOTICE "return 1";

/* Fence (quorum mode): while the permit (ARGV[1]) is live, raise the
 * slot's high-water mark to the grant's token. */
static const char lua_fence_counted[] =
    LUA_MARK LUA_NOW LUA_MINE "if not exp or exp <= now then return 0 end "
                              "if mark(KEYS[2]) < tonumber(ARGV[2]) then "
                              "redis.call('set', KEYS[2], ARGV[2]) end return 1";

/* ---- Redisson's format ----
 *
 * A name in Redisson's format (docs/redisson.md) is stored as Java
 * Redisson's RLock stores it: the key is the name itself, a hash of one
 * field per holder, "ID:THREAD" -> its hold count, with a TTL that the
 * holder's watchdog renews by PEXPIRE while its field is there; the last
 * unlock deletes the key and publishes 0 on "redisson_lock__channel:{NAME}".
 * dlock's field is its token and ":0", and its count the lease's holds. The
 * keys dlock keeps beside (the slot's fencing mark, the waiting hosts) are
 * its own, under its prefix: Redisson never reads them. A key of another
 * type is read with pcall: someone else's, never an error. */
#define LUA_FIELD_OURS "local ours = redis.pcall('hexists', KEYS[1], ARGV[1]) == 1 "
/* Publishes v on channel ch (none when empty; "s" in sharded: SPUBLISH);
 * how many clients got it. The releases in Redisson's formats answer 1 +
 * that count: the agent learns whether others than itself wait. */
#define LUA_PUBLISH                                                                                \
    "local function publish_on(ch, sharded, v) if ch == '' then return 0 end "                     \
    "if sharded == 's' then return redis.call('spublish', ch, v) end "                             \
    "return redis.call('publish', ch, v) end "

/* Acquire: KEYS and ARGV[2..6] as the exclusive acquire's; ARGV[1] our
 * field, ARGV[7] the hold count. Redisson's own acquire takes the key when
 * it does not exist (or holds its field: its re-entry); ours is a new
 * field, so only the first. */
static const char lua_acquire_redisson[] = LUA_MARK LUA_CLOCK LUA_GRANT LUA_QUEUE LUA_READERS
    "if queue_turn() then join_as(false) return 0 end "
    "if redis.call('exists', KEYS[1]) == 0 then "
    "redis.call('hset', KEYS[1], ARGV[1], ARGV[7]) redis.call('pexpire', KEYS[1], ARGV[2]) "
    "if queued then redis.call('hdel', KEYS[3], me) end "
    "return grant_fence() end "
    "join_as(false) local t = redis.call('pttl', KEYS[1]) if t < 0 then t = 0 end return -t";

/* Renew: while our field (ARGV[1]) is there, the count follows the lease's
 * holds (ARGV[3]) and the key's TTL is ARGV[2], as Redisson's watchdog
 * renews its own. */
static const char lua_renew_redisson[] =
    LUA_FIELD_OURS "if not ours then return 0 end "
                   "redis.call('hset', KEYS[1], ARGV[1], ARGV[3]) "
                   "return redis.call('pexpire', KEYS[1], ARGV[2])";

/* Release: while our field is there, the key goes (a lease ends with all
 * its holds), and with a channel (ARGV[2]) Redisson's unlock message
 * (ARGV[3], "0") goes on it, always: Redisson's waiters are in no record
 * of ours. ARGV[4] "s": SPUBLISH, as Redisson does on Redis Cluster. */
static const char lua_release_redisson[] =
    LUA_FIELD_OURS LUA_PUBLISH "if not ours then return 0 end redis.call('del', KEYS[1]) "
                               "return 1 + publish_on(ARGV[2], ARGV[4], ARGV[3])";

/* Fence (quorum mode): while our field is there, raise the slot's mark. */
static const char lua_fence_redisson[] =
    LUA_MARK LUA_FIELD_OURS "if not ours then return 0 end "
                            "if mark(KEYS[2]) < tonumber(ARGV[2]) then "
                            "redis.call('set', KEYS[2], ARGV[2]) end return 1";

/* Redisson's RReadWriteLock format: the key is the name, a hash whose
 * field "mode" is "read" or "write"; a writer's field is "ID:THREAD:write",
 * a reader's "ID:THREAD", each -> its hold count; each of a reader's holds
 * I has a key "{NAME}:ID:THREAD:rwlock_timeout:I" with the hold's TTL, and
 * the hash's TTL is the latest of them (Redisson's read unlock reads them
 * all; its read watchdog renews them all). The last unlock deletes the hash
 * and publishes on "redisson_rwlock:{NAME}": 0 after a reader, 1 after a
 * writer. dlock's reader keeps one timeout key per hold, as Redisson does;
 * the fields are dlock's token and ":0" (and ":write" for a writer).
 * ARGV[8] of each script says which side: "write" or "read". Renewals never
 * shorten the hash's TTL, which other readers' holds may need. */
#define LUA_RW                                                                                     \
    "local write = ARGV[8] == 'write' "                                                            \
    "local field = write and (ARGV[1] .. ':write') or ARGV[1] "                                    \
    "local tkey = '{' .. KEYS[1] .. '}:' .. ARGV[1] .. ':rwlock_timeout:' "                        \
    "local function stretch(ms) if redis.call('pttl', KEYS[1]) < tonumber(ms) then "               \
    "redis.call('pexpire', KEYS[1], ms) end end "                                                  \
    "local function timeouts(from, to, ms) for i = from, to do "                                   \
    "if ms then redis.call('set', tkey .. i, 1, 'px', ms) else redis.call('del', tkey .. i) end "  \
    "end end "                                                                                     \
    "local held = redis.pcall('hget', KEYS[1], field) "                                            \
    "if type(held) ~= 'string' then held = false end "

/* Acquire: KEYS and ARGV[1..7] as Redisson's RLock acquire's. A key of
 * another type, or a hash without a mode, is taken; so is a write mode, and
 * a read mode for a writer. A reader that is granted adds its field to the
 * readers (the turn as for dlock's shared kind: after the waiting writers). */
static const char lua_acquire_rw[] = LUA_MARK LUA_CLOCK LUA_GRANT LUA_QUEUE LUA_READERS LUA_RW
    "local mode = redis.pcall('hget', KEYS[1], 'mode') "
    "local function taken() join_as(not write) local t = redis.call('pttl', KEYS[1]) "
    "if t < 0 then t = 0 end return -t end "
    "if type(mode) ~= 'string' and (mode ~= false or redis.call('exists', KEYS[1]) == 1) then "
    "return taken() end "
    "if queue_turn((not write) and readers or nil) then join_as(not write) return 0 end "
    "if mode == 'write' or (mode == 'read' and write) then return taken() end "
    "if not mode then redis.call('hset', KEYS[1], 'mode', write and 'write' or 'read') end "
    "redis.call('hset', KEYS[1], field, ARGV[7]) "
    "if not write then timeouts(1, tonumber(ARGV[7]), ARGV[2]) end stretch(ARGV[2]) "
    "if queued then redis.call('hdel', KEYS[3], me) end redis.call('hdel', KEYS[4], me) "
    "return grant_fence()";

/* Renew: while our field is there, its count follows the holds (ARGV[3]),
 * a reader's timeout keys with it, and the hash lasts ARGV[2] ms at least. */
static const char lua_renew_rw[] = LUA_RW
    "if not held then return 0 end local n = tonumber(ARGV[3]) "
    "redis.call('hset', KEYS[1], field, ARGV[3]) "
    "if not write then timeouts(1, n, ARGV[2]) timeouts(n + 1, tonumber(held) or 0, nil) end "
    "stretch(ARGV[2]) return 1";

/* Release: while our field is there, it goes (a reader's timeout keys with
 * it). A reader: while other holders remain, the hash lasts as long as the
 * latest of their holds' timeout keys (as Redisson's read unlock does), and
 * goes when none is left; a writer: the hash goes unless its holder's reads
 * remain (mode read). When the hash goes, the unlock message goes on the
 * channel (ARGV[2]; empty: none), 0 after a reader and 1 after a writer;
 * ARGV[4] "s": SPUBLISH. */
static const char lua_release_rw[] = LUA_RW LUA_PUBLISH
    "if not held then return 0 end redis.call('hdel', KEYS[1], field) "
    "if not write then timeouts(1, tonumber(held) or 0, nil) end "
    "if redis.call('hlen', KEYS[1]) > 1 then "
    "if write then redis.call('hset', KEYS[1], 'mode', 'read') return 1 end "
    "local latest = -3 for _, f in ipairs(redis.call('hkeys', KEYS[1])) do "
    "local c = tonumber(redis.call('hget', KEYS[1], f)) if c then for i = c, 1, -1 do "
    "latest = math.max(latest, redis.call('pttl', '{' .. KEYS[1] .. '}:' .. f .. "
    "':rwlock_timeout:' .. i)) end end end "
    "if latest > 0 then redis.call('pexpire', KEYS[1], latest) return 1 end "
    "if redis.call('hget', KEYS[1], 'mode') == 'write' then return 1 end end "
    "redis.call('del', KEYS[1]) "
    "return 1 + publish_on(ARGV[2], ARGV[4], write and '1' or '0')";

/* Fence (quorum mode): while our field is there, raise the slot's mark to
 * the grant's token (ARGV[2]). */
static const char lua_fence_rw[] =
    LUA_MARK LUA_RW "if not held then return 0 end "
                    "if mark(KEYS[2]) < tonumber(ARGV[2]) then "
                    "redis.call('set', KEYS[2], ARGV[2]) end return 1";

/* Redisson's RPermitExpirableSemaphore format: the key is the name, a
 * string with the number of free permits (set by Redisson's trySetPermits,
 * or by dlock's first acquire to its N); each permit taken is a member of
 * the sorted set "{NAME}:timeout", its id (16 bytes) -> its expiry (ms since
 * 1970; Redisson's by its client's clock, dlock's by the server's). Whoever
 * comes next gives the lapsed permits back (reclaim(), as Redisson does,
 * publishing the free count). A release gives the permit back and publishes
 * the free count on "redisson_sc:{NAME}", always. dlock's permit id is its
 * token's 16 bytes. The semaphore's size is the free count plus the permits
 * taken: an acquire that asks for another N answers "sem:SIZE", as dlock's
 * own semaphores do. Keys of other types are read with pcall: taken. */
#define LUA_SEM                                                                                    \
    "local t0 = redis.call('time') "                                                               \
    "local now = tonumber(t0[1]) * 1000 + math.floor(tonumber(t0[2]) / 1000) " LUA_PUBLISH         \
    "local function publish(v) return publish_on(SEM_CH, SEM_SHARDED, v) end "                     \
    "local function reclaim() local gone = redis.call('zrangebyscore', SEM_Z, 0, now) "            \
    "if #gone > 0 then redis.call('zrem', SEM_Z, unpack(gone)) "                                   \
    "local v = redis.call('incrby', KEYS[1], #gone) if v > 0 then publish(v) end end end "         \
    "local function expiry() local e = redis.pcall('zscore', SEM_Z, ARGV[1]) "                     \
    "if type(e) ~= 'string' then return nil end return tonumber(e) end "

/* Acquire: KEYS as dlock's acquires' and the sorted set (KEYS[5]); ARGV[1]
 * the permit id, ARGV[2..6] as the exclusive acquire's, ARGV[7] N, ARGV[8]
 * the channel, ARGV[9] "s" for SPUBLISH. No free permit: taken, with the
 * time until the first permit lapses. */
static const char lua_acquire_sem[] =
    "local SEM_Z, SEM_CH, SEM_SHARDED = KEYS[5], ARGV[8], ARGV[9] " LUA_MARK LUA_CLOCK LUA_GRANT
        LUA_QUEUE LUA_READERS LUA_SEM "local v = redis.pcall('get', KEYS[1]) "
    "local z = redis.call('type', KEYS[5]).ok "
    "if (v and type(v) ~= 'string') or (z ~= 'none' and z ~= 'zset') or (v and not tonumber(v)) "
    "then join_as(false) return 0 end "
    "if v then reclaim() end local taken = redis.call('zcard', KEYS[5]) local n = "
    "tonumber(ARGV[7]) "
    "if not v then redis.call('set', KEYS[1], math.max(n - taken, 0)) end "
    "local free = tonumber(redis.call('get', KEYS[1])) "
    "if free + taken ~= n then return 'sem:' .. string.format('%d', free + taken) end "
    "if queue_turn() then join_as(false) return 0 end "
    "if free < 1 then join_as(false) local first = redis.call('zrange', KEYS[5], 0, 0, "
    "'WITHSCORES') "
    "local left = first[2] and tonumber(first[2]) - now or 0 if left < 0 then left = 0 end "
    "return -left end "
    "redis.call('decrby', KEYS[1], 1) "
    "redis.call('zadd', KEYS[5], now + tonumber(ARGV[2]), ARGV[1]) "
    "if queued then redis.call('hdel', KEYS[3], me) end "
    "return grant_fence()";

/* Renew: while our permit (ARGV[1]) is live, its expiry moves to ARGV[2] ms
 * from now (never earlier). KEYS: the name, the sorted set; ARGV[3] the
 * channel, ARGV[4] "s". A lapsed permit is not ours: given back. */
static const char lua_renew_sem[] =
    "local SEM_Z, SEM_CH, SEM_SHARDED = KEYS[2], ARGV[3], ARGV[4] " LUA_SEM
    "local e = expiry() if not e then return 0 end "
    "if e <= now then reclaim() return 0 end "
    "redis.call('zadd', KEYS[2], math.max(e, now + tonumber(ARGV[2])), ARGV[1]) return 1";

/* Release: our permit (ARGV[1]) goes back, and the free count goes on the
 * channel (ARGV[2]; empty: none). KEYS, ARGV[3] as the renewal's. */
static const char lua_release_sem[] =
    "local SEM_Z, SEM_CH, SEM_SHARDED = KEYS[2], ARGV[2], ARGV[3] " LUA_SEM
    "local e = expiry() if not e then return 0 end redis.call('zrem', KEYS[2], ARGV[1]) "
    "local heard = publish(redis.call('incrby', KEYS[1], 1)) if e <= now then return 0 end "
    "return 1 + heard";

/* Fence (quorum mode): while our permit is live, raise the slot's mark.
 * KEYS: the name, the mark, the sorted set. */
static const char lua_fence_sem[] =
    "local SEM_Z, SEM_CH, SEM_SHARDED = KEYS[3], '', '' " LUA_MARK LUA_SEM
    "local e = expiry() if not e or e <= now then return 0 end "
    "if mark(KEYS[2]) < tonumber(ARGV[2]) then redis.call('set', KEYS[2], ARGV[2]) end return 1";

/* Lookup of a semaphore in Redisson's format: {'', '', -1, KIND, N, and
 * for each of the first PERMITS_SHOWN live permits: its id in hex, its
 * PTTL, "1"}, KIND "redisson:semaphore"; an empty key when there is no
 * semaphore. KEYS: the name, the sorted set. */
#define LUA_LOOKUP_SEM                                                                             \
    "local t0 = redis.call('time') "                                                               \
    "local now = tonumber(t0[1]) * 1000 + math.floor(tonumber(t0[2]) / 1000) "                     \
    "if redis.call('type', KEYS[2]).ok ~= 'zset' then "                                            \
    "local v = redis.pcall('get', KEYS[1]) if type(v) ~= 'string' then v = '' end "                \
    "return {v, '', redis.call('pttl', KEYS[1])} end "                                             \
    "local all = redis.call('zrangebyscore', KEYS[2], now + 1, '+inf', 'WITHSCORES') "             \
    "local out = {'', '', -1, 'redisson:semaphore', #all / 2} "                                    \
    "for i = 1, math.min(#all, 2 * " PERMITS_SHOWN "), 2 do "                                      \
    "out[#out + 1] = (all[i]:gsub('.', function(c) return string.format('%02x', c:byte()) end)) "  \
    "out[#out + 1] = tonumber(all[i + 1]) - now out[#out + 1] = '1' end return out"
static const char lua_lookup_sem[] = LUA_LOOKUP_SEM;

/* Force in Redisson's semaphore format: the lookup's answer, then every
 * permit taken given back (the sorted set goes, the free count rises by its
 * size) and the free count published (ARGV[1] the channel, ARGV[2] "s"). */
static const char lua_force_sem[] =
    "local function look() " LUA_LOOKUP_SEM " end local out = look() " LUA_PUBLISH
    "if redis.call('type', KEYS[2]).ok == 'zset' then "
    "local n = redis.call('zcard', KEYS[2]) redis.call('del', KEYS[2]) "
    "local v = redis.pcall('incrby', KEYS[1], n) "
    "if type(v) == 'number' then publish_on(ARGV[1], ARGV[2], v) end end return out";

/* ---- keys and arguments ---- */

static void arg(struct script_args *a, const char *s, size_t len)
{
    a->v[a->n] = s;
    a->len[a->n++] = len;
}

/* A number among the arguments, held in a->num[i]. */
static void arg_num(struct script_args *a, int i, unsigned long long n)
{
    arg(a, a->num[i], (size_t)snprintf(a->num[i], sizeof a->num[i], "%llu", n));
}

/* numkeys, then the lock key (written into a->key by script_command()). */
static void arg_keys(struct script_args *a, int keys, const struct script_ctx *ctx,
                     const struct backend_req *req)
{
    arg(a, a->numkeys, (size_t)snprintf(a->numkeys, sizeof a->numkeys, "%d", keys));
    arg(a, a->key, a->key_len);
}

/* A key that dlock keeps beside the lock key, under the prefix. */
static size_t side(const struct script_ctx *ctx, struct script_args *a, const char *suffix,
                   char *out)
{
    return side_key_of(ctx->prefix, ctx->prefix_len, a->key, a->key_len, suffix, out);
}

static size_t hw_key(const struct script_ctx *ctx, struct script_args *a)
{
    return fence_hw_key_of(ctx->tags, ctx->prefix, ctx->prefix_len, a->key, a->key_len, a->hw);
}

/* The token (32 hex characters), or empty when the request has none. */
static void arg_token(struct script_args *a, const struct backend_req *req)
{
    arg(a, req->token ? req->token : "", req->token ? 32 : 0);
}

/* KEYS of both acquires: the lock, the slot's mark, the waiting-hosts
 * record, the readers' marks. */
static void acquire_keys(const struct script_ctx *ctx, const struct backend_req *req,
                         struct script_args *a)
{
    arg_keys(a, 4, ctx, req);
    arg(a, a->hw, hw_key(ctx, a));
    arg(a, a->side, side(ctx, a, WAITING_SUFFIX, a->side));
    arg(a, a->readers, side(ctx, a, READERS_SUFFIX, a->readers));
}

/* ARGV[2] to ARGV[6] of both acquires: the TTL, the token's floor (empty:
 * the server's clock), the block, the agent's id (empty: none) and how
 * long a waiting caller joins the record, with its keep-alive key after a
 * space when the entry is bound to it. */
static void acquire_argv(const struct script_ctx *ctx, const struct backend_req *req,
                         struct script_args *a)
{
    arg_num(a, 0, req->ttl_ms);
    if (req->floor)
        arg_num(a, 1, req->floor);
    else
        arg(a, "", 0);
    arg_num(a, 2, req->block);
    arg(a, req->waiter_id ? req->waiter_id : "", req->waiter_id ? strlen(req->waiter_id) : 0);
    if (!req->bound || !req->waiter_id || !req->want_ms) {
        arg_num(a, 3, req->want_ms);
        return;
    }
    int n = snprintf(a->want, sizeof a->want, "%u ", (unsigned)req->want_ms);
    size_t len =
        (size_t)n + keepalive_key(ctx->prefix, ctx->prefix_len, req->waiter_id, a->want + n);
    arg(a, a->want, len);
}

/* ARGV[1]: the key's value (the token, and the holder record after a
 * space); then acquire_argv(). */
static void build_acquire(const struct script_ctx *ctx, const struct backend_req *req,
                          uint32_t permits, struct script_args *a)
{
    acquire_keys(ctx, req, a);
    const char *token = req->token ? req->token : "";
    int n = req->holder && req->holder[0]
                ? snprintf(a->value, sizeof a->value, "%.32s %s", token, req->holder)
                : snprintf(a->value, sizeof a->value, "%.32s", token);
    arg(a, a->value, n < (int)sizeof a->value ? (size_t)n : sizeof a->value - 1);
    acquire_argv(ctx, req, a);
}

/* ARGV: the token, acquire_argv(), the kind ("shared" for permits 0, else
 * "sem:N"), the holder record. */
static void build_acquire_counted(const struct script_ctx *ctx, const struct backend_req *req,
                                  uint32_t permits, struct script_args *a)
{
    acquire_keys(ctx, req, a);
    arg_token(a, req);
    acquire_argv(ctx, req, a);
    arg(a, a->kind,
        (size_t)(permits ? snprintf(a->kind, sizeof a->kind, "sem:%u", (unsigned)permits)
                         : snprintf(a->kind, sizeof a->kind, "shared")));
    const char *holder = req->holder ? req->holder : "";
    arg(a, holder, strlen(holder));
}

/* KEYS: the lock. ARGV: the token, the TTL. */
static void build_renew(const struct script_ctx *ctx, const struct backend_req *req,
                        uint32_t permits, struct script_args *a)
{
    arg_keys(a, 1, ctx, req);
    arg_token(a, req);
    arg_num(a, 0, req->ttl_ms);
}

/* KEYS: the lock, and (but on Redis Cluster) the waiting-hosts record, the
 * slot's mark and the readers' marks (the exclusive release's grant). ARGV:
 * the token, the release channel (empty: no notice), the name, and "s" to
 * publish with SPUBLISH. */
static void build_release(const struct script_ctx *ctx, const struct backend_req *req,
                          uint32_t permits, struct script_args *a)
{
    arg_keys(a, ctx->sharded ? 1 : 4, ctx, req);
    if (!ctx->sharded) {
        arg(a, a->side, side(ctx, a, WAITING_SUFFIX, a->side));
        arg(a, a->hw, hw_key(ctx, a));
        arg(a, a->readers, side(ctx, a, READERS_SUFFIX, a->readers));
    }
    arg_token(a, req);
    arg(a, a->channel, req->notify ? side(ctx, a, RELEASED_SUFFIX, a->channel) : 0);
    arg(a, req->name, req->len);
    arg(a, ctx->sharded ? "s" : "", ctx->sharded);
}

/* KEYS: the lock, the slot's mark. ARGV: the token, the grant's token. */
static void build_fence(const struct script_ctx *ctx, const struct backend_req *req,
                        uint32_t permits, struct script_args *a)
{
    arg_keys(a, 2, ctx, req);
    arg(a, a->hw, hw_key(ctx, a));
    arg_token(a, req);
    arg_num(a, 0, req->fence);
}

/* KEYS: the lock, and (but on Redis Cluster) the holder record of earlier
 * versions: while a slot migrates, a script naming two keys of which the
 * new master has one only gets TRYAGAIN until the move ends. */
static void build_lookup(const struct script_ctx *ctx, const struct backend_req *req,
                         uint32_t permits, struct script_args *a)
{
    arg_keys(a, ctx->sharded ? 1 : 2, ctx, req);
    if (!ctx->sharded)
        arg(a, a->side, side(ctx, a, HOLDER_SUFFIX, a->side));
}

/* Redisson's format: our field, the token and ":0". */
static void arg_field(struct script_args *a, const struct backend_req *req)
{
    arg(a, a->value,
        (size_t)snprintf(a->value, sizeof a->value, "%.32s" SCRIPT_FIELD_SUFFIX,
                         req->token ? req->token : ""));
}

/* The hold count: the lease's holds, at least 1. */
static void arg_holds(struct script_args *a, int i, const struct backend_req *req)
{
    arg_num(a, i, req->holds ? req->holds : 1);
}

/* KEYS as the exclusive acquire's; ARGV: our field, acquire_argv(), the
 * hold count. */
static void build_acquire_redisson(const struct script_ctx *ctx, const struct backend_req *req,
                                   uint32_t permits, struct script_args *a)
{
    acquire_keys(ctx, req, a);
    arg_field(a, req);
    acquire_argv(ctx, req, a);
    arg_holds(a, 4, req);
}

/* KEYS: the name. ARGV: our field, the TTL, the hold count. */
static void build_renew_redisson(const struct script_ctx *ctx, const struct backend_req *req,
                                 uint32_t permits, struct script_args *a)
{
    arg_keys(a, 1, ctx, req);
    arg_field(a, req);
    arg_num(a, 0, req->ttl_ms);
    arg_holds(a, 1, req);
}

/* KEYS: the name. ARGV: our field, Redisson's channel of the name (empty:
 * no message), the unlock message, "s" to publish with SPUBLISH. */
static void build_release_redisson(const struct script_ctx *ctx, const struct backend_req *req,
                                   uint32_t permits, struct script_args *a)
{
    arg_keys(a, 1, ctx, req);
    arg_field(a, req);
    arg(a, a->channel,
        req->notify ? redisson_channel(formats_of(ctx->formats, req->name, req->len), req->name,
                                       req->len, a->channel)
                    : 0);
    arg(a, SCRIPT_REDISSON_UNLOCK, sizeof SCRIPT_REDISSON_UNLOCK - 1);
    arg(a, ctx->sharded ? "s" : "", ctx->sharded);
}

/* The side of a read-write lock: ARGV[8] of its scripts. */
static void arg_side(struct script_args *a, int at, const struct backend_req *req)
{
    while (a->n < at)
        arg(a, "", 0); /* arguments the script does not read */
    const char *side = req->kind == LOCK_EXCLUSIVE ? "write" : "read";
    arg(a, side, strlen(side));
}

/* RReadWriteLock: the arguments of the RLock scripts, then the side. */
static void build_acquire_rw(const struct script_ctx *ctx, const struct backend_req *req,
                             uint32_t permits, struct script_args *a)
{
    build_acquire_redisson(ctx, req, permits, a);
    arg_side(a, 2 + 1 + 4 + 7, req);
}

static void build_renew_rw(const struct script_ctx *ctx, const struct backend_req *req,
                           uint32_t permits, struct script_args *a)
{
    build_renew_redisson(ctx, req, permits, a);
    arg_side(a, 2 + 1 + 1 + 7, req);
}

static void build_release_rw(const struct script_ctx *ctx, const struct backend_req *req,
                             uint32_t permits, struct script_args *a)
{
    build_release_redisson(ctx, req, permits, a);
    arg_side(a, 2 + 1 + 1 + 7, req);
}

/* The semaphore's keys and arguments: the permit id is the token's 16
 * bytes. */
static void arg_permit_id(struct script_args *a, const struct backend_req *req)
{
    size_t n = 0;
    for (; req->token && n < 16; n++) {
        unsigned byte;
        if (sscanf(req->token + 2 * n, "%2x", &byte) != 1)
            break;
        a->value[n] = (char)byte;
    }
    arg(a, a->value, n);
}

static void arg_timeout_key(struct script_args *a, const struct backend_req *req)
{
    arg(a, a->extra, redisson_timeout_key(req->name, req->len, a->extra));
}

static void arg_sem_channel(const struct script_ctx *ctx, const struct backend_req *req,
                            bool notify, struct script_args *a)
{
    arg(a, a->channel,
        notify ? redisson_channel(KEY_FORMAT_REDISSON_SEM, req->name, req->len, a->channel) : 0);
    arg(a, ctx->sharded ? "s" : "", ctx->sharded);
}

/* KEYS: dlock's acquires' and the sorted set. ARGV: the permit id,
 * acquire_argv(), N, the channel, "s". */
static void build_acquire_sem(const struct script_ctx *ctx, const struct backend_req *req,
                              uint32_t permits, struct script_args *a)
{
    arg_keys(a, 5, ctx, req);
    arg(a, a->hw, hw_key(ctx, a));
    arg(a, a->side, side(ctx, a, WAITING_SUFFIX, a->side));
    arg(a, a->readers, side(ctx, a, READERS_SUFFIX, a->readers));
    arg_timeout_key(a, req);
    arg_permit_id(a, req);
    acquire_argv(ctx, req, a);
    arg_num(a, 4, permits);
    arg_sem_channel(ctx, req, true, a);
}

/* KEYS: the name, the sorted set. ARGV: the permit id, the TTL, the
 * channel, "s". */
static void build_renew_sem(const struct script_ctx *ctx, const struct backend_req *req,
                            uint32_t permits, struct script_args *a)
{
    arg_keys(a, 2, ctx, req);
    arg_timeout_key(a, req);
    arg_permit_id(a, req);
    arg_num(a, 0, req->ttl_ms);
    arg_sem_channel(ctx, req, true, a);
}

/* KEYS: the name, the sorted set. ARGV: the permit id, the channel (empty:
 * no message), "s". */
static void build_release_sem(const struct script_ctx *ctx, const struct backend_req *req,
                              uint32_t permits, struct script_args *a)
{
    arg_keys(a, 2, ctx, req);
    arg_timeout_key(a, req);
    arg_permit_id(a, req);
    arg_sem_channel(ctx, req, req->notify, a);
}

/* KEYS: the name, the slot's mark, the sorted set. ARGV: the permit id, the
 * grant's token. */
static void build_fence_sem(const struct script_ctx *ctx, const struct backend_req *req,
                            uint32_t permits, struct script_args *a)
{
    arg_keys(a, 3, ctx, req);
    arg(a, a->hw, hw_key(ctx, a));
    arg_timeout_key(a, req);
    arg_permit_id(a, req);
    arg_num(a, 0, req->fence);
}

/* KEYS: the name, the sorted set. */
static void build_lookup_sem(const struct script_ctx *ctx, const struct backend_req *req,
                             uint32_t permits, struct script_args *a)
{
    arg_keys(a, 2, ctx, req);
    arg_timeout_key(a, req);
}

/* KEYS: the name, the slot's mark. ARGV: our field, the grant's token. */
static void build_fence_redisson(const struct script_ctx *ctx, const struct backend_req *req,
                                 uint32_t permits, struct script_args *a)
{
    arg_keys(a, 2, ctx, req);
    arg(a, a->hw, hw_key(ctx, a));
    arg_field(a, req);
    arg_num(a, 0, req->fence);
}

static void build_fence_rw(const struct script_ctx *ctx, const struct backend_req *req,
                           uint32_t permits, struct script_args *a)
{
    build_fence_redisson(ctx, req, permits, a);
    arg_side(a, 2 + 1 + 2 + 7, req);
}

/* KEYS: the lock, and (but on Redis Cluster, as for the lookup) the holder
 * record of earlier versions and the waiting-hosts record. ARGV: the release channel (a name in
 * dlock's format; else empty: no notice), the name, and "s" for SPUBLISH. */
static void build_force(const struct script_ctx *ctx, const struct backend_req *req,
                        uint32_t permits, struct script_args *a)
{
    arg_keys(a, ctx->sharded ? 1 : 3, ctx, req);
    if (!ctx->sharded) {
        arg(a, a->side, side(ctx, a, HOLDER_SUFFIX, a->side));
        arg(a, a->readers, side(ctx, a, WAITING_SUFFIX, a->readers));
    }
    bool own = formats_of(ctx->formats, req->name, req->len) == KEY_FORMAT_DLOCK;
    arg(a, a->channel, own ? side(ctx, a, RELEASED_SUFFIX, a->channel) : 0);
    arg(a, req->name, req->len);
    arg(a, ctx->sharded ? "s" : "", ctx->sharded);
}

/* KEYS: the name, the sorted set. ARGV: the channel, "s". */
static void build_force_sem(const struct script_ctx *ctx, const struct backend_req *req,
                            uint32_t permits, struct script_args *a)
{
    arg_keys(a, 2, ctx, req);
    arg_timeout_key(a, req);
    arg_sem_channel(ctx, req, true, a);
}

size_t script_lock_key(const struct script_ctx *ctx, const char *name, size_t len, char *out)
{
    size_t n = 0;
    if (formats_of(ctx->formats, name, len) == KEY_FORMAT_DLOCK) {
        memcpy(out, ctx->prefix, ctx->prefix_len);
        n = ctx->prefix_len;
    }
    memcpy(out + n, name, len);
    out[n + len] = '\0';
    return n + len;
}

int script_command(enum script_id s, const char *sha, const struct script_ctx *ctx,
                   const struct backend_req *req, uint32_t permits, struct script_args *a)
{
    const struct script_def *d = &script_table[s];
    if (ctx->prefix_len > CONFIG_PREFIX_MAX || req->len > WIRE_MAX_NAME)
        return DLOCK_EINVAL;
    a->n = 0;
    if (sha && sha[0]) {
        arg(a, "EVALSHA", 7);
        arg(a, sha, strlen(sha));
    } else {
        arg(a, "EVAL", 4);
        arg(a, d->src, strlen(d->src));
    }
    a->key_len = script_lock_key(ctx, req->name, req->len, a->key);
    d->build(ctx, req, permits, a);
    return 0;
}

/* ---- replies ---- */

/* Acquire: the token when taken, else the holder's PTTL negated (0:
 * unknown, or another host's turn). */
static void decode_acquire(const redisReply *rep, struct script_result *out,
                           struct script_holders *h)
{
    if (out->kind != SR_RESULT)
        return;
    out->wrote = out->n > 0;
    if (out->wrote) {
        out->outcome = BACKEND_DONE;
        out->fence = (uint64_t)out->n;
    } else {
        out->outcome = BACKEND_TAKEN;
        out->pttl_ms = -out->n;
    }
}

/* Counted acquire: as the exclusive one's, or the kind the name is held as
 * (a string). */
static void decode_acquire_counted(const redisReply *rep, struct script_result *out,
                                   struct script_holders *h)
{
    if (out->kind == SR_UNEXPECTED && rep->type == REDIS_REPLY_STRING) {
        *out =
            (struct script_result){.kind = SR_RESULT, .outcome = BACKEND_TAKEN, .mismatch = true};
        snprintf(out->held, sizeof out->held, "%s", rep->str);
        return;
    }
    decode_acquire(rep, out, h);
}

/* A release in Redisson's formats: 1 + the clients its message reached when
 * done, 0 not our key. */
static void decode_release_heard(const redisReply *rep, struct script_result *out,
                                 struct script_holders *h)
{
    if (out->kind != SR_RESULT)
        return;
    out->wrote = out->n >= 1;
    out->outcome = out->wrote ? BACKEND_DONE : BACKEND_NOT_OURS;
    out->listeners = out->n > 1 ? (uint32_t)(out->n - 1 > UINT32_MAX ? UINT32_MAX : out->n - 1) : 0;
}

/* Renew, release, fence: 1 done, 0 not our key. */
static void decode_flag(const redisReply *rep, struct script_result *out, struct script_holders *h)
{
    if (out->kind != SR_RESULT)
        return;
    out->wrote = out->n == 1;
    out->outcome = out->wrote ? BACKEND_DONE : BACKEND_NOT_OURS;
}

/* A counted key's lookup: [_, _, PTTL, KIND, N, (TOKEN, PTTL, HOLDER)...].
 * A kind is text: one with a NUL byte is no kind (it would read as empty). */
static bool counted_of(const redisReply *rep, struct script_holders *h)
{
    if (rep->elements < 5 || (rep->elements - 5) % 3 != 0 ||
        rep->element[3]->type != REDIS_REPLY_STRING || rep->element[3]->len == 0 ||
        memchr(rep->element[3]->str, '\0', rep->element[3]->len) ||
        rep->element[4]->type != REDIS_REPLY_INTEGER || rep->element[4]->integer < 0)
        return false;
    snprintf(h->holder.kind, sizeof h->holder.kind, "%s", rep->element[3]->str);
    bool redisson = strncmp(h->holder.kind, "redisson", 8) == 0;
    snprintf(h->holder.value, sizeof h->holder.value, "%s", h->holder.kind);
    h->holder.permits =
        (unsigned)(rep->element[4]->integer > UINT32_MAX ? UINT32_MAX : rep->element[4]->integer);
    for (size_t i = 5; i < rep->elements && h->holder.shown < SCRIPT_PERMITS_SHOWN; i += 3) {
        const redisReply *tok = rep->element[i], *ttl = rep->element[i + 1],
                         *rec = rep->element[i + 2];
        if (tok->type != REDIS_REPLY_STRING || ttl->type != REDIS_REPLY_INTEGER ||
            rec->type != REDIS_REPLY_STRING)
            return false;
        struct backend_permit *p = &h->holder.permit[h->holder.shown++];
        p->pttl_ms = ttl->integer;
        if (redisson) {
            /* The holder's field, and its hold count; dlock's field is
             * its token and SCRIPT_FIELD_SUFFIX. */
            snprintf(p->record, sizeof p->record, "%s", tok->str);
            p->holds = (unsigned)strtoul(rec->str, NULL, 10);
            if (strcmp(h->holder.kind, "redisson:semaphore") != 0 &&
                tok->len >= 32 + sizeof SCRIPT_FIELD_SUFFIX - 1 &&
                (strcmp(tok->str + 32, SCRIPT_FIELD_SUFFIX) == 0 ||
                 strcmp(tok->str + 32, SCRIPT_FIELD_SUFFIX ":write") == 0))
                snprintf(p->token, sizeof p->token, "%.32s", tok->str);
            continue;
        }
        snprintf(p->token, sizeof p->token, "%s", tok->str);
        snprintf(p->record, sizeof p->record, "%s%s%s", tok->str, rec->str[0] ? " " : "", rec->str);
    }
    if (h->holder.shown)
        memcpy(h->holder.record, h->holder.permit[0].record, sizeof h->holder.record);
    h->holder.nodes_holding = h->holder.value[0] != '\0';
    return true;
}

/* Lookup: [value, record, PTTL] (elements of another type than a string
 * read as empty), or a counted key's (counted_of()). */
static void decode_lookup(const redisReply *rep, struct script_result *out,
                          struct script_holders *h)
{
    if (out->kind != SR_UNEXPECTED || rep->type != REDIS_REPLY_ARRAY || rep->elements < 3 ||
        rep->element[2]->type != REDIS_REPLY_INTEGER)
        return;
    memset(h, 0, sizeof *h);
    h->holder = (struct backend_holder){.pttl = rep->element[2]->integer, .nodes = 1};
    if (rep->elements == 3) {
        const redisReply *v = rep->element[0], *r = rep->element[1];
        snprintf(h->holder.value, sizeof h->holder.value, "%s", v->str ? v->str : "");
        snprintf(h->holder.record, sizeof h->holder.record, "%s", r->str ? r->str : "");
        h->holder.nodes_holding = h->holder.value[0] != '\0';
    } else if (!counted_of(rep, h)) {
        return;
    }
    out->kind = SR_HOLDER;
    out->err = 0;
}

void script_decode(enum script_id s, const redisReply *rep, struct script_result *out,
                   struct script_holders *h)
{
    struct script_reply sr;
    struct script_holders spare;
    reply_script(rep, &sr);
    if (!h)
        h = &spare;
    *out = (struct script_result){.kind = sr.kind, .err = sr.err, .text = sr.text, .n = sr.n};
    if (sr.kind == SR_RESULT || sr.kind == SR_UNEXPECTED)
        script_table[s].decode(rep, out, h);
    if (out->kind == SR_RESULT && script_table[s].lookup) {
        /* An integer is no lookup's answer. */
        out->kind = SR_UNEXPECTED;
        out->err = DLOCK_EBACKEND;
    }
}

struct backend_result script_backend_result(const struct script_result *sr, int err,
                                            const char *text, uint64_t at)
{
    struct backend_result r = {.err = err, .at = at, .error_text = err ? text : NULL};
    if (!err) {
        r.outcome = sr->mismatch ? BACKEND_MISMATCH : sr->outcome;
        r.fence = sr->fence;
        r.pttl_ms = sr->pttl_ms;
        r.listeners = sr->listeners;
    }
    return r;
}

const struct script_def script_table[SCRIPT_COUNT] = {
    [SCRIPT_ACQUIRE] = {.what = "acquire",
                        .op = BACKEND_ACQUIRE,
                        .src = lua_acquire,
                        .keys = 4,
                        .wait = true,
                        .build = build_acquire,
                        .decode = decode_acquire},
    [SCRIPT_RENEW] = {.what = "renewal",
                      .op = BACKEND_RENEW,
                      .src = lua_renew,
                      .keys = 1,
                      .wait = true,
                      .urgent = true,
                      .build = build_renew,
                      .decode = decode_flag},
    [SCRIPT_RELEASE] = {.what = "release",
                        .op = BACKEND_RELEASE,
                        .src = lua_release,
                        .keys = 4,
                        .urgent = true,
                        .build = build_release,
                        .decode = decode_flag},
    [SCRIPT_FENCE] = {.what = "fence",
                      .op = BACKEND_FENCE,
                      .src = lua_fence,
                      .keys = 2,
                      .urgent = true,
                      .build = build_fence,
                      .decode = decode_flag},
    [SCRIPT_LOOKUP] = {.what = "lookup",
                       .src = lua_lookup,
                       .keys = 2,
                       .lookup = true,
                       .build = build_lookup,
                       .decode = decode_lookup},
    [SCRIPT_ACQUIRE_COUNTED] = {.what = "acquire",
                                .op = BACKEND_ACQUIRE,
                                .src = lua_acquire_counted,
                                .keys = 4,
                                .wait = true,
                                .build = build_acquire_counted,
                                .decode = decode_acquire_counted},
    [SCRIPT_RENEW_COUNTED] = {.what = "renewal",
                              .op = BACKEND_RENEW,
                              .src = lua_renew_counted,
                              .keys = 1,
                              .wait = true,
                              .urgent = true,
                              .build = build_renew,
                              .decode = decode_flag},
    [SCRIPT_RELEASE_COUNTED] = {.what = "release",
                                .op = BACKEND_RELEASE,
                                .src = lua_release_counted,
                                .keys = 4,
                                .urgent = true,
                                .build = build_release,
                                .decode = decode_flag},
    [SCRIPT_FENCE_COUNTED] = {.what = "fence",
                              .op = BACKEND_FENCE,
                              .src = lua_fence_counted,
                              .keys = 2,
                              .urgent = true,
                              .build = build_fence,
                              .decode = decode_flag},
    [SCRIPT_ACQUIRE_REDISSON] = {.what = "acquire",
                                 .op = BACKEND_ACQUIRE,
                                 .src = lua_acquire_redisson,
                                 .keys = 4,
                                 .wait = true,
                                 .build = build_acquire_redisson,
                                 .decode = decode_acquire},
    [SCRIPT_RENEW_REDISSON] = {.what = "renewal",
                               .op = BACKEND_RENEW,
                               .src = lua_renew_redisson,
                               .keys = 1,
                               .wait = true,
                               .urgent = true,
                               .build = build_renew_redisson,
                               .decode = decode_flag},
    [SCRIPT_RELEASE_REDISSON] = {.what = "release",
                                 .op = BACKEND_RELEASE,
                                 .src = lua_release_redisson,
                                 .keys = 1,
                                 .urgent = true,
                                 .build = build_release_redisson,
                                 .decode = decode_release_heard},
    [SCRIPT_ACQUIRE_RW] = {.what = "acquire",
                           .op = BACKEND_ACQUIRE,
                           .src = lua_acquire_rw,
                           .keys = 4,
                           .wait = true,
                           .build = build_acquire_rw,
                           .decode = decode_acquire},
    [SCRIPT_RENEW_RW] = {.what = "renewal",
                         .op = BACKEND_RENEW,
                         .src = lua_renew_rw,
                         .keys = 1,
                         .wait = true,
                         .urgent = true,
                         .build = build_renew_rw,
                         .decode = decode_flag},
    [SCRIPT_RELEASE_RW] = {.what = "release",
                           .op = BACKEND_RELEASE,
                           .src = lua_release_rw,
                           .keys = 1,
                           .urgent = true,
                           .build = build_release_rw,
                           .decode = decode_release_heard},
    [SCRIPT_FENCE_RW] = {.what = "fence",
                         .op = BACKEND_FENCE,
                         .src = lua_fence_rw,
                         .keys = 2,
                         .urgent = true,
                         .build = build_fence_rw,
                         .decode = decode_flag},
    [SCRIPT_ACQUIRE_SEM] = {.what = "acquire",
                            .op = BACKEND_ACQUIRE,
                            .src = lua_acquire_sem,
                            .keys = 5,
                            .wait = true,
                            .build = build_acquire_sem,
                            .decode = decode_acquire_counted},
    [SCRIPT_RENEW_SEM] = {.what = "renewal",
                          .op = BACKEND_RENEW,
                          .src = lua_renew_sem,
                          .keys = 2,
                          .wait = true,
                          .urgent = true,
                          .build = build_renew_sem,
                          .decode = decode_flag},
    [SCRIPT_RELEASE_SEM] = {.what = "release",
                            .op = BACKEND_RELEASE,
                            .src = lua_release_sem,
                            .keys = 2,
                            .urgent = true,
                            .build = build_release_sem,
                            .decode = decode_release_heard},
    [SCRIPT_FENCE_SEM] = {.what = "fence",
                          .op = BACKEND_FENCE,
                          .src = lua_fence_sem,
                          .keys = 3,
                          .urgent = true,
                          .build = build_fence_sem,
                          .decode = decode_flag},
    [SCRIPT_LOOKUP_SEM] = {.what = "lookup",
                           .src = lua_lookup_sem,
                           .keys = 2,
                           .lookup = true,
                           .build = build_lookup_sem,
                           .decode = decode_lookup},
    [SCRIPT_FORCE] = {.what = "forced release",
                      .op = BACKEND_FORCE,
                      .src = lua_force,
                      .keys = 3,
                      .urgent = true,
                      .lookup = true,
                      .build = build_force,
                      .decode = decode_lookup},
    [SCRIPT_FORCE_SEM] = {.what = "forced release",
                          .op = BACKEND_FORCE,
                          .src = lua_force_sem,
                          .keys = 2,
                          .urgent = true,
                          .lookup = true,
                          .build = build_force_sem,
                          .decode = decode_lookup},
    [SCRIPT_FENCE_REDISSON] = {.what = "fence",
                               .op = BACKEND_FENCE,
                               .src = lua_fence_redisson,
                               .keys = 2,
                               .urgent = true,
                               .build = build_fence_redisson,
                               .decode = decode_flag},
};
