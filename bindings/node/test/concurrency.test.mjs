import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Worker } from 'node:worker_threads';
import { startAgent, uniq, waitFor } from './helper.mjs';
import { Client, BusyError, TimeoutError } from '../index.mjs';

const INDEX = new URL('../index.mjs', import.meta.url).href;

let agent;
before(async () => {
  agent = await startAgent();
});
after(async () => {
  await agent?.stop();
});

test('many concurrent acquires on one client (Promise.all)', async () => {
  const client = await Client.open({ socket: agent.sock });
  const base = uniq('many');
  const names = Array.from({ length: 100 }, (_, i) => `${base}:${i}`);
  const leases = await Promise.all(names.map((n) => client.acquire(n, { wait: 10000 })));
  assert.deepEqual(leases.map((l) => l.name), names);
  assert.ok(leases.every((l) => l.valid));
  assert.equal((await agent.leases(`${base}:*`)).length, 100);
  await Promise.all(leases.map((l) => l.release()));
  await waitFor(async () => (await agent.leases(`${base}:*`)).length === 0, 'all released');
  await client.close();
});

test('one client, four async workers on one name: plain acquires take turns, one at a time', async () => {
  const client = await Client.open({ socket: agent.sock });
  const name = uniq('turns');
  let inside = 0;
  let turns = 0;
  const fences = [];
  async function worker() {
    for (let i = 0; i < 15; i++) {
      const lease = await client.acquire(name, { wait: 30000 });
      assert.equal(inside, 0, 'two holders at once');
      inside++;
      fences.push(lease.fence);
      await new Promise((r) => setImmediate(r));
      lease.check();
      inside--;
      turns++;
      await lease.release();
    }
  }
  await Promise.all([1, 2, 3, 4].map(worker));
  assert.equal(turns, 60);
  for (let i = 1; i < fences.length; i++) assert.ok(fences[i] > fences[i - 1], 'fences rise');
  await client.close();
});

test('two tasks on one client, one name: the second waits for the first, no HeldError', async () => {
  const client = await Client.open({ socket: agent.sock });
  const name = uniq('owners');
  const first = await client.acquire(name);
  // a try-once by the second task finds the name busy, as another client would
  await assert.rejects(client.acquire(name), BusyError);
  let granted = false;
  const second = client.acquire(name, { wait: 30000 }).then((l) => {
    granted = true;
    return l;
  });
  await waitFor(async () => (await agent.waiters(name)) === 1, 'the second task waiting in the agent');
  assert.equal(granted, false);
  assert.equal(first.valid, true);
  await first.release();
  const lease = await second;
  assert.equal(lease.valid, true);
  assert.ok(lease.fence > first.fence);
  await lease.release();
  await client.close();
});

test('a plain acquire of a name the same code holds waits for itself until its wait runs out', async () => {
  const client = await Client.open({ socket: agent.sock });
  const name = uniq('self');
  const outer = await client.acquire(name);
  await assert.rejects(client.acquire(name, { wait: 200 }), TimeoutError);
  assert.equal(await agent.waiters(name), 0, 'no waiter left');
  assert.equal(outer.valid, true);
  await outer.release();
  // re-entry is what `reentrant` is for
  const a = await client.acquire(name, { reentrant: true, owner: 5, wait: 10000 });
  const b = await client.acquire(name, { reentrant: true, owner: 5 });
  assert.equal(b.fence, a.fence);
  assert.equal(b.holds, 2);
  await assert.rejects(client.acquire(name, { reentrant: true, owner: 6 }), BusyError);
  await b.release();
  await a.release();
  await client.close();
});

test('owners: a caller owner must be below 2^63; owner needs reentrant', async () => {
  const client = await Client.open({ socket: agent.sock });
  const name = uniq('owner');
  await assert.rejects(client.acquire(name, { reentrant: true, owner: 1n << 63n }), RangeError);
  await assert.rejects(client.acquire(name, { reentrant: true, owner: (1n << 64n) - 1n }), RangeError);
  await assert.rejects(client.acquire(name, { owner: 3 }), RangeError);
  assert.equal((await agent.leases(name)).length, 0, 'nothing was sent');
  const top = await client.acquire(name, { reentrant: true, owner: (1n << 63n) - 1n });
  const again = await client.acquire(name, { reentrant: true, owner: (1n << 63n) - 1n });
  assert.equal(top.holds, 2);
  await again.release();
  await top.release();
  await client.close();
});

test('worker threads, each with its own client, contend for one name', async () => {
  const name = uniq('threads');
  const src = `
    import { workerData, parentPort } from 'node:worker_threads';
    const { Client } = await import(workerData.index);
    const client = await Client.open({ socket: workerData.sock });
    const fences = [];
    for (let i = 0; i < 20; i++) {
      const lease = await client.acquire(workerData.name, { wait: 30000 });
      fences.push(String(lease.fence));
      await lease.release();
    }
    await client.close();
    parentPort.postMessage(fences);
  `;
  const runs = [1, 2, 3].map(() => new Promise((resolve, reject) => {
    const w = new Worker(new URL(`data:text/javascript,${encodeURIComponent(src)}`), {
      workerData: { index: INDEX, sock: agent.sock, name },
    });
    w.once('message', resolve);
    w.once('error', reject);
    w.once('exit', (code) => code && reject(new Error(`worker exited ${code}`)));
  }));
  const all = (await Promise.all(runs)).flat();
  assert.equal(all.length, 60);
  assert.equal(new Set(all).size, 60, 'every grant has a fence of its own');
});
