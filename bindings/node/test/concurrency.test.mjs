import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Worker } from 'node:worker_threads';
import { startAgent, uniq, waitFor } from './helper.mjs';
import { Client, HeldError } from '../index.mjs';

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

test('one client, four async workers on one name: owners take turns, one at a time', async () => {
  const client = await Client.open({ socket: agent.sock });
  const name = uniq('turns');
  let inside = 0;
  let turns = 0;
  const fences = [];
  async function worker(owner) {
    for (let i = 0; i < 15; i++) {
      const lease = await client.acquire(name, { reentrant: true, owner, wait: 30000 });
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

test('without owners, a name the client holds is refused at once with HeldError', async () => {
  const client = await Client.open({ socket: agent.sock });
  const name = uniq('held');
  const lease = await client.acquire(name);
  await assert.rejects(client.acquire(name, { wait: 30000 }), HeldError);
  await lease.release();
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
