// Benchmark of the dlock Node.js binding against redlock (node-redlock 5 on ioredis, one Redis).
// Rows on stdout (see bench/bindings/node/run); anything else on stderr.
//   ROW node NET CASE IMPL OPS_PER_S P50_US P99_US
//   VALID node NS_PER_CALL GET_US
import Redis from 'ioredis';
import Redlock from 'redlock';
import { Client } from './dlock/index.mjs';

const PAIRS = Number(process.env.BENCH_PAIRS || 2000);
const SECONDS = Number(process.env.BENCH_SECONDS || 2);
const WORKERS = 4;
const WARMUP = 100;
const TTL = 30000;
const tag = `bench:node:${process.pid}`;

const now = () => process.hrtime.bigint();
const us = (ns) => Number(ns) / 1e3;
const f1 = (x) => (Number.isFinite(x) ? x.toFixed(1) : '0.0');

function pct(sorted, p) {
  if (!sorted.length) return 0;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

function row(net, kase, impl, ops, samples) {
  const s = Float64Array.from(samples).sort();
  console.log(`ROW node ${net} ${kase} ${impl} ${f1(ops)} ${f1(pct(s, 50))} ${f1(pct(s, 99))}`);
}

// ---- the two implementations behind one shape: lock(name, wait?) -> release function ----

async function dlockImpl(socket) {
  const client = await Client.open({ socket });
  return {
    // plain acquires: the tasks of one client wait for each other on a name
    async lock(name, wait) {
      const lease = await client.acquire(name, { ttl: TTL, wait: wait ? Infinity : 0 });
      return () => lease.release();
    },
    close: () => client.close(),
  };
}

function redlockImpl(path, contended) {
  const redis = new Redis({ path, lazyConnect: false, enableAutoPipelining: false });
  // redlock's defaults (retryCount 10, retryDelay 200 ms, retryJitter 100 ms), except that the
  // contended case retries for as long as the run needs: with 10 retries a waiter gives up
  // after about 2 s, which is no lock wait at all
  const redlock = new Redlock([redis], contended ? { retryCount: 100000 } : {});
  redlock.on('error', () => {}); // a failed attempt of a retried acquire is no error here
  return {
    async lock(name) {
      const lock = await redlock.acquire([name], TTL);
      return () => lock.release();
    },
    close: async () => {
      redis.disconnect();
    },
  };
}

// Each case runs its implementations in ROUNDS alternating rounds (a, b then b, a then a, b
// then b, a), so that a drift of the machine's speed during the run weighs on each of them alike;
// an implementation's counts, times and samples are summed over its own rounds.
const ROUNDS = 4;

function roundOrder(impls, r) {
  return r % 2 === 0 ? impls : [...impls].reverse();
}

// the share of round r (0..ROUNDS-1) of total, the shares summing to total
function share(total, r) {
  return Math.floor(((r + 1) * total) / ROUNDS) - Math.floor((r * total) / ROUNDS);
}

function tally() {
  return { ops: 0, ns: 0n, samples: [] };
}

async function pairsRound(impl, net, name, first, count, t) {
  const t0 = now();
  for (let i = first; i < first + count; i++) {
    const a = now();
    const release = await impl.lock(`${tag}:${net}:${name}:pairs:${i}`);
    await release();
    t.samples.push(us(now() - a));
  }
  t.ns += now() - t0;
  t.ops += count;
}

// impls: [[name, impl], ...], open for the whole case
async function pairs(impls, net) {
  for (const [name, impl] of impls) {
    for (let i = 0; i < WARMUP; i++) await (await impl.lock(`${tag}:${net}:${name}:warm:${i}`))();
  }
  const tallies = new Map(impls.map(([name]) => [name, tally()]));
  let first = 0;
  for (let r = 0; r < ROUNDS; r++) {
    const count = share(PAIRS, r);
    for (const [name, impl] of roundOrder(impls, r)) {
      await pairsRound(impl, net, name, first, count, tallies.get(name));
    }
    first += count;
  }
  for (const [name] of impls) {
    const t = tallies.get(name);
    row(net, 'pairs', name, t.ops / (Number(t.ns) / 1e9), t.samples);
  }
}

async function contendedRound(impl, net, name, seconds, t) {
  const lockName = `${tag}:${net}:${name}:contended`;
  const t0 = now();
  const end = t0 + BigInt(Math.round(seconds * 1e9));
  async function worker() {
    while (now() < end) {
      const a = now();
      const release = await impl.lock(lockName, true);
      t.samples.push(us(now() - a));
      t.ops++;
      await release();
    }
  }
  await Promise.all(Array.from({ length: WORKERS }, () => worker()));
  t.ns += now() - t0;
}

async function contended(impls, net) {
  const tallies = new Map(impls.map(([name]) => [name, tally()]));
  for (let r = 0; r < ROUNDS; r++) {
    for (const [name, impl] of roundOrder(impls, r)) {
      await contendedRound(impl, net, name, SECONDS / ROUNDS, tallies.get(name));
    }
  }
  for (const [name] of impls) {
    const t = tallies.get(name);
    row(net, 'contended', name, t.ops / (Number(t.ns) / 1e9), t.samples);
  }
}

async function validCost(socket) {
  const client = await Client.open({ socket });
  const lease = await client.acquire(`${tag}:valid`, { ttl: TTL });
  const N = 2_000_000;
  let ok = 0;
  for (let i = 0; i < 100_000; i++) if (lease.valid) ok++; // warm-up
  const t0 = now();
  for (let i = 0; i < N; i++) if (lease.valid) ok++;
  const ns = Number(now() - t0) / N;
  if (ok !== N + 100_000) throw new Error('the lease turned invalid during the run');
  await lease.release();
  await client.close();
  return ns;
}

async function getCost(path) {
  const redis = new Redis({ path });
  await redis.set(`${tag}:get`, 'x');
  const lat = [];
  for (let i = 0; i < 200; i++) await redis.get(`${tag}:get`);
  for (let i = 0; i < 2000; i++) {
    const a = now();
    await redis.get(`${tag}:get`);
    lat.push(us(now() - a));
  }
  await redis.del(`${tag}:get`);
  redis.disconnect();
  return pct(Float64Array.from(lat).sort(), 50);
}

const nets = [
  ['loopback', process.env.DLOCK_SOCKET, process.env.REDIS_SOCKET],
  ['delayed', process.env.DLOCK_SOCKET_DELAYED, process.env.REDIS_SOCKET_DELAYED],
];

for (const [net, dsock, rsock] of nets) {
  if (!dsock || !rsock) {
    console.error(`bench: ${net}: no agent or Redis socket given, skipped`);
    continue;
  }
  console.error(`bench: ${net}: pairs`);
  {
    const impls = [
      ['dlock', await dlockImpl(dsock)],
      ['native', redlockImpl(rsock, false)],
    ];
    await pairs(impls, net);
    for (const [, impl] of impls) await impl.close();
  }
  console.error(`bench: ${net}: contended`);
  {
    const impls = [
      ['dlock', await dlockImpl(dsock)],
      ['native', redlockImpl(rsock, true)],
    ];
    await contended(impls, net);
    for (const [, impl] of impls) await impl.close();
  }
}

if (process.env.DLOCK_SOCKET && process.env.REDIS_SOCKET) {
  const ns = await validCost(process.env.DLOCK_SOCKET);
  const get = await getCost(process.env.REDIS_SOCKET);
  console.log(`VALID node ${f1(ns)} ${f1(get)}`);
}
