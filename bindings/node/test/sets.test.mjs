import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { startAgent, uniq, waitFor, redis, DLOCKCTL } from './helper.mjs';
import {
  Client, LeaseSet, BusyError, TimeoutError, LostError, InvalidNameError, DlockError,
} from '../index.mjs';

let agent;
let a;
let b;
before(async () => {
  agent = await startAgent();
  a = await Client.open({ socket: agent.sock });
  b = await Client.open({ socket: agent.sock });
});
after(async () => {
  await a?.close();
  await b?.close();
  await agent?.stop();
});

const held = async (name) => (await agent.leases(name)).length === 1;

test('a set holds every name; names and leases in the caller\'s order; release gives all back', async () => {
  const base = uniq('set');
  const names = [`${base}:c`, `${base}:a`, `${base}:b`];
  const set = await a.acquireSet(names, { ttl: 10000 });
  assert.ok(set instanceof LeaseSet);
  assert.deepEqual(set.names, names);
  assert.deepEqual(set.leases.map((l) => l.name), names);
  assert.equal(set.valid, true);
  set.check();
  assert.equal((await agent.leases(`${base}:*`)).length, 3);
  await assert.rejects(b.acquire(names[1]), BusyError);
  // a member is released only with its set
  await assert.rejects(set.leases[0].release(), (e) => e instanceof DlockError && e.code === 'EINVAL');
  assert.equal(set.leases[0].valid, true);
  await set.release();
  assert.equal(set.valid, false);
  assert.ok(set.leases.every((l) => !l.valid));
  await set.release(); // again: nothing
  await waitFor(async () => (await agent.leases(`${base}:*`)).length === 0, 'every name released');
});

test('all or nothing: one name taken elsewhere, and no name of the set is held', async () => {
  const base = uniq('aon');
  const names = [`${base}:a`, `${base}:b`, `${base}:c`];
  const other = await b.acquire(names[1]);
  await assert.rejects(a.acquireSet(names), (e) => {
    assert.ok(e instanceof BusyError);
    assert.equal(e.lock, names[1]);
    return true;
  });
  await waitFor(async () => (await agent.leases(`${base}:*`)).length === 1, 'a rolled back');
  // a wait that runs out is a TimeoutError, with the same roll-back and no waiter left
  await assert.rejects(a.acquireSet(names, { wait: 300 }), TimeoutError);
  await waitFor(async () => (await agent.leases(`${base}:*`)).length === 1, 'a rolled back');
  assert.equal(await agent.waiters(names[1]), 0);
  await other.release();
  const set = await a.acquireSet(names, { wait: 10000 });
  assert.equal(set.valid, true);
  await set.release();
});

test('names are taken one at a time, byte-wise ascending (UTF-8), whatever the order given', async () => {
  const base = uniq('order');
  // UTF-16 order puts the emoji (D83D) before U+FF01; byte-wise UTF-8 puts EF BC 81 first
  const low = `${base}:\uff01`;
  const high = `${base}:\u{1f600}`;
  const first = `${base}:0`;
  const other = await b.acquire(low);
  const setting = a.acquireSet([high, low, first], { wait: 20000 });
  await waitFor(async () => (await agent.waiters(low)) === 1, 'the set waiting for the lower name');
  assert.ok(await held(first), 'the first name in byte order is taken');
  assert.equal((await agent.leases(high)).length, 0, 'the higher name is not taken yet');
  await other.release();
  const set = await setting;
  assert.deepEqual(set.names, [high, low, first]);
  assert.equal(set.valid, true);
  await set.release();
});

test('two overlapping sets in opposite orders, on two clients and on one, never deadlock', async () => {
  const base = uniq('dead');
  const names = [`${base}:x`, `${base}:y`, `${base}:z`];
  let inside = 0;
  let rounds = 0;
  async function loop(client, ns) {
    for (let i = 0; i < 25; i++) {
      const set = await client.acquireSet(ns, { wait: 60000 });
      assert.equal(inside, 0, 'two sets held at once');
      inside++;
      await new Promise((r) => setImmediate(r));
      set.check();
      inside--;
      rounds++;
      await set.release();
    }
  }
  const rev = [...names].reverse();
  await Promise.all([loop(a, names), loop(b, rev), loop(a, rev), loop(b, [names[1], names[0], names[2]])]);
  assert.equal(rounds, 100);
  await waitFor(async () => (await agent.leases(`${base}:*`)).length === 0, 'all released');
});

test('a member lost while a later name is waited for: LostError, everything given back', async () => {
  const base = uniq('lostm');
  const [x, y] = [`${base}:a`, `${base}:b`];
  const other = await b.acquire(y);
  const setting = a.acquireSet([y, x], { wait: 60000, ttl: 2000 });
  await waitFor(async () => (await agent.waiters(y)) === 1, 'the set waiting for the second name');
  assert.ok(await held(x));
  assert.equal(await redis(agent.redisSock, 'DEL', `dlock:${x}`), ':1');
  await assert.rejects(setting, (e) => e instanceof LostError && e.code === 'ELOST');
  assert.equal(await agent.waiters(y), 0, 'the wait for the second name was cancelled');
  await other.release();
  await waitFor(async () => (await agent.leases(`${base}:*`)).length === 0, 'nothing held');
});

// Blocks this process, its event loop included, until fn() is true (polled), or throws.
function blockUntil(fn, what, ms = 20000) {
  const end = Date.now() + ms;
  const nap = new Int32Array(new SharedArrayBuffer(4));
  while (!fn()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    Atomics.wait(nap, 0, 0, 20);
  }
}
const ctlSync = (...args) => execFileSync(DLOCKCTL, ['-s', agent.sock, ...args], { timeout: 10000 });
const leasesSync = (name) => JSON.parse(ctlSync('leases', '--json', name)).leases;

test('a member lost in the same read as its grant: LostError at once, the next name not waited for', async () => {
  const base = uniq('lostgrant');
  const [x, y, z] = [`${base}:a`, `${base}:b`, `${base}:c`];
  const oy = await b.acquire(y);
  const oz = await b.acquire(z);
  const setting = a.acquireSet([z, y, x], { wait: 30000, ttl: 1000 });
  await waitFor(async () => (await agent.waiters(y)) === 1, 'the set waiting for its second name');
  // While this process reads nothing, y is granted to the set, its key deleted in Redis, and
  // the agent finds the lease lost: the grant and the LOST are then read together.
  const oldFence = Number(oy.fence);
  const released = oy.release(); // sent at once
  blockUntil(() => leasesSync(y).some((l) => l.fence !== oldFence), 'the grant of the second name');
  execFileSync('redis-cli', ['-s', agent.redisSock, 'DEL', `dlock:${y}`], { timeout: 10000 });
  blockUntil(() => leasesSync(y).length === 0, 'the loss of the second name');
  ctlSync('status', '--json'); // one more turn of the agent's loop: the LOST was written
  await released;
  await assert.rejects(setting, (e) => e instanceof LostError && e.code === 'ELOST' && /lost/.test(e.message));
  assert.equal(await agent.waiters(z), 0, 'the third name was not waited for');
  await oz.release();
  await waitFor(async () => (await agent.leases(`${base}:*`)).length === 0, 'nothing held');
});

test('aborting a set cancels its wait and gives back what it took', async () => {
  const base = uniq('abortset');
  const [x, y] = [`${base}:a`, `${base}:b`];
  const other = await b.acquire(y);
  const ac = new AbortController();
  const setting = a.acquireSet([x, y], { wait: Infinity, signal: ac.signal });
  await waitFor(async () => (await agent.waiters(y)) === 1, 'the set waiting');
  ac.abort();
  await assert.rejects(setting, (e) => e.name === 'AbortError');
  assert.equal(await agent.waiters(y), 0);
  await waitFor(async () => (await agent.leases(x)).length === 0, 'the first name given back');
  await other.release();
});

test('a set\'s lost event, and valid turns false with one member', async () => {
  const base = uniq('setev');
  const names = [`${base}:a`, `${base}:b`];
  const set = await a.acquireSet(names, { ttl: 2000 });
  const lost = new Promise((r) => set.once('lost', (err, lease) => r({ err, lease })));
  assert.equal(await redis(agent.redisSock, 'DEL', `dlock:${names[1]}`), ':1');
  const ev = await lost;
  assert.ok(ev.err instanceof LostError);
  assert.equal(ev.lease.name, names[1]);
  assert.equal(set.valid, false);
  assert.equal(set.leases[0].valid, true);
  assert.throws(() => set.check(), LostError);
  await assert.rejects(set.release(), LostError);
  await waitFor(async () => (await agent.leases(`${base}:*`)).length === 0, 'nothing held');
});

test('bad sets are refused before anything is sent', async () => {
  const base = uniq('badset');
  await assert.rejects(a.acquireSet([]), RangeError);
  await assert.rejects(a.acquireSet('x'), TypeError);
  await assert.rejects(a.acquireSet([`${base}:a`, `${base}:a`]), RangeError);
  await assert.rejects(a.acquireSet(Array.from({ length: 65 }, (_, i) => `${base}:${i}`)), RangeError);
  await assert.rejects(a.acquireSet([`${base}:a`, '']), InvalidNameError);
  await assert.rejects(a.acquireSet([`${base}:a`], { kind: 'semaphore' }), RangeError);
  assert.equal((await agent.leases(`${base}:*`)).length, 0);
  // a name the agent refuses (too long) rolls back the names taken before it
  await assert.rejects(a.acquireSet([`${base}:a`, `${base}:${'n'.repeat(300)}`]), InvalidNameError);
  await waitFor(async () => (await agent.leases(`${base}:*`)).length === 0, 'rolled back');
});

test('sets of shared names: two readers\' sets hold together', async () => {
  const base = uniq('rset');
  const names = [`${base}:a`, `${base}:b`];
  const s1 = await a.acquireSet(names, { kind: 'shared' });
  const s2 = await a.acquireSet(names, { kind: 'shared' });
  assert.ok(s1.valid && s2.valid);
  await assert.rejects(b.acquireSet(names), BusyError);
  await s1.release();
  await s2.release();
});
