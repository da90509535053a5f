#!/usr/bin/env node
// SPDX-License-Identifier: BSD-3-Clause
// driver.js -- drives node-redisson's RLock for dlock's interoperability
// tests (tests/test_node_redisson.c), one command per line.
//
//   node driver.js HOST:PORT [WATCHDOG_MS]
//
// Connects to the Redis at HOST:PORT (TCP) as one node-redisson client
// (WATCHDOG_MS: its lockWatchdogTimeout, 30000 by default), prints
// `ready T` once both of its connections answer, then reads commands on
// standard input and answers each with one line, in order:
//
//   trylock NAME WAIT_MS  tryLock(WAIT_MS) under the watchdog:
//                         `ok T` (held), `busy T` (not taken, no error),
//                         or `error MSG`
//   lock NAME             lock() under the watchdog: `ok T` once held
//   unlock NAME           unlock(): `ok T`, T taken just before the call
//   count NAME KEY N      N times: lock NAME, GET KEY, SET KEY to one more,
//                         unlock NAME: `ok T N` after the last unlock
//   field NAME            `ok FIELD`: the hash field this client holds
//                         NAME under (node-redisson: `<client id>:<lock id>`)
//   quit                  `ok T`, then closes the connections and exits
//
// T is process.hrtime.bigint() in nanoseconds: CLOCK_MONOTONIC on Linux, the
// clock of the C test's clock_gettime(CLOCK_MONOTONIC). Any failure answers
// `error MSG` on one line. The driver exits when its standard input closes
// and the commands read before have run.
//
// One RLock object per name, kept for the driver's life: node-redisson tells
// holders apart by the object (each has its own id), so an unlock has to go
// through the object that locked, and a second lock of a name this driver
// holds is re-entrant. Commands run one at a time: a `lock` that waits holds
// up the commands behind it.
//
// node-redisson 1.0.4 (dist/) against Java Redisson 3.52 (RedissonLock,
// RedissonBaseLock, LockPubSub, renewal/LockTask):
// - The same scripts: tryLock is tryLockInnerAsync's (EXISTS or HEXISTS,
//   HINCRBY, PEXPIRE, else PTTL), unlock is unlockInnerAsync's (an unlock
//   latch key, HINCRBY -1, PEXPIRE while the count is above 0, else DEL and
//   publish "0" on redisson_lock__channel:{NAME}). The publish is always
//   PUBLISH (Java: SPUBLISH with sharded Pub/Sub), and the latch key
//   redisson_unlock_latch:{NAME}:<request id> lives 10 ms (Java: its
//   command timeout times its retries, seconds).
// - The hash field is `<client id>:<lock id>`, both random UUIDs: the second
//   is the RLock object's (or the clientId given to getLock()), where Java
//   has the thread id. A hold is the object's, not the thread's.
// - Channel and latch names put NAME in braces unless it starts with `{`;
//   Java's do unless it contains `{` anywhere (a name such as a{b} gets
//   redisson_lock__channel:{a{b}} here, redisson_lock__channel:a{b} in Java).
// - A waiter tries, subscribes and waits (Java tries again between the
//   subscription and the wait): an unlock published in between is missed,
//   and the waiter sleeps out the PTTL it saw (the holder's TTL, 30 s under
//   Redisson's watchdog) before it tries again. Its timer is not cancelled
//   when a notice wakes it: when it fires it unsubscribes the channel, also
//   under a later wait of the same process, which then sleeps out its own
//   PTTL. Any message on the channel
//   wakes it (Java: "0" or "1" only).
// - The watchdog renews every lockWatchdogTimeout / 3 with Java's renewal
//   script (HEXISTS then PEXPIRE), one timer per client and name, for the
//   first holder only; after a Redis error it logs and stops for good (Java
//   logs and goes on, and renews all of a client's names in batches).
// - The package depends on ioredis without declaring it (its only peer
//   dependency is typescript, unused at run time): package.json pins
//   ioredis, and .npmrc keeps npm from installing the peer.
'use strict';

const { Redisson } = require('node-redisson');

const now = () => process.hrtime.bigint().toString();
const say = (line) => process.stdout.write(line + '\n');
const oneLine = (e) =>
    String((e && e.message) || e)
        .replace(/[\r\n]+/g, ' ')
        .trim() || 'unknown error';

function usage(msg) {
    process.stderr.write(`driver.js: ${msg}\nusage: node driver.js HOST:PORT [WATCHDOG_MS]\n`);
    process.exit(2);
}

const addr = process.argv[2] || '';
const colon = addr.lastIndexOf(':');
if (colon <= 0) usage('no HOST:PORT');
const host = addr.slice(0, colon);
const port = Number(addr.slice(colon + 1));
if (!Number.isInteger(port) || port <= 0 || port > 65535) usage(`bad port in ${addr}`);
let watchdogMs = 30000n;
if (process.argv[3] !== undefined) {
    if (!/^[1-9][0-9]*$/.test(process.argv[3])) usage(`bad WATCHDOG_MS ${process.argv[3]}`);
    watchdogMs = BigInt(process.argv[3]);
}

const redisson = new Redisson({
    redis: { options: { host, port } },
    lockWatchdogTimeout: watchdogMs,
});
const locks = new Map();
const lockOf = (name) => {
    let l = locks.get(name);
    if (!l) {
        l = redisson.getLock(name);
        locks.set(name, l);
    }
    return l;
};

function needArgs(args, n, form) {
    if (args.length !== n) throw new Error(`usage: ${form}`);
}

function count(s) {
    if (!/^(0|[1-9][0-9]*)$/.test(s)) throw new Error(`not a count: ${s}`);
    return Number(s);
}

// Each command takes its arguments and returns its answer line.
const commands = {
    async trylock(args) {
        needArgs(args, 2, 'trylock NAME WAIT_MS');
        const got = await lockOf(args[0]).tryLock(count(args[1]));
        return `${got ? 'ok' : 'busy'} ${now()}`;
    },
    async lock(args) {
        needArgs(args, 1, 'lock NAME');
        await lockOf(args[0]).lock();
        return `ok ${now()}`;
    },
    async unlock(args) {
        needArgs(args, 1, 'unlock NAME');
        const l = lockOf(args[0]);
        const t = now();
        await l.unlock();
        return `ok ${t}`;
    },
    async count(args) {
        needArgs(args, 3, 'count NAME KEY N');
        const l = lockOf(args[0]);
        const key = args[1];
        const n = count(args[2]);
        for (let i = 0; i < n; i++) {
            await l.lock();
            const v = await redisson.redis.get(key);
            await redisson.redis.set(key, String(Number(v || '0') + 1));
            await l.unlock();
        }
        return `ok ${now()} ${n}`;
    },
    async field(args) {
        needArgs(args, 1, 'field NAME');
        const l = lockOf(args[0]);
        return `ok ${l.getClientName(l.clientId)}`;
    },
    async quit(args) {
        needArgs(args, 0, 'quit');
        return `ok ${now()}`;
    },
};

async function run(line) {
    const words = line.trim().split(/\s+/).filter((w) => w.length);
    if (!words.length) return { answer: 'error empty command' };
    const known = Object.prototype.hasOwnProperty.call(commands, words[0]);
    const cmd = known ? commands[words[0]] : null;
    if (!cmd) return { answer: `error unknown command ${words[0]}` };
    try {
        return { answer: await cmd(words.slice(1)), quit: words[0] === 'quit' };
    } catch (e) {
        return { answer: `error ${oneLine(e)}` };
    }
}

// Lines are queued as they come and run one at a time.
const queue = [];
let running = false;
let pending = '';
let ended = false;

async function pump() {
    if (running) return;
    running = true;
    while (queue.length) {
        const r = await run(queue.shift());
        say(r.answer);
        if (r.quit) {
            await redisson.quit();
            process.exit(0);
        }
    }
    running = false;
    if (ended) process.exit(0);
}

async function main() {
    const ex = redisson.commandExecutor;
    await Promise.all([ex.redis.ping(), ex.subscribeRedis.ping()]);
    say(`ready ${now()}`);
    process.stdin.setEncoding('utf8');
    process.stdin.on('data', (chunk) => {
        pending += chunk;
        let nl;
        while ((nl = pending.indexOf('\n')) >= 0) {
            queue.push(pending.slice(0, nl));
            pending = pending.slice(nl + 1);
        }
        pump();
    });
    // Once standard input closes, the driver exits after the commands it
    // has read (holds left behind expire at the watchdog's TTL).
    process.stdin.on('end', () => {
        ended = true;
        if (!running) process.exit(0);
    });
}

main().catch((e) => {
    say(`error ${oneLine(e)}`);
    process.exit(1);
});
