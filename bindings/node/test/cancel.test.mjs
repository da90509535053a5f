import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startAgent, uniq, waitFor } from './helper.mjs';
import { Client } from '../index.mjs';

let agent;
let holder;
let client;
before(async () => {
  agent = await startAgent();
  holder = await Client.open({ socket: agent.sock });
  client = await Client.open({ socket: agent.sock });
});
after(async () => {
  await holder?.close();
  await client?.close();
  await agent?.stop();
});

test('abort cancels the wait in the agent: AbortError, and no waiter is left', async () => {
  const name = uniq('abort');
  const held = await holder.acquire(name);
  const ac = new AbortController();
  const waiting = client.acquire(name, { wait: Infinity, signal: ac.signal });
  await waitFor(async () => (await agent.waiters(name)) === 1, 'the waiter in the agent');
  ac.abort();
  await assert.rejects(waiting, (e) => e instanceof DOMException && e.name === 'AbortError');
  // the promise is rejected once the agent has dropped the request
  assert.equal(await agent.waiters(name), 0);
  await held.release();
  await waitFor(async () => (await agent.leases(name)).length === 0, 'the release');
  // nothing was granted to the cancelled acquire: the name is free
  const again = await holder.acquire(name);
  await again.release();
});

test('abort rejects with the signal reason (AbortSignal.timeout, a custom reason)', async () => {
  const name = uniq('reason');
  const held = await holder.acquire(name);
  await assert.rejects(client.acquire(name, { wait: 60000, signal: AbortSignal.timeout(100) }),
    (e) => e instanceof DOMException && e.name === 'TimeoutError');
  assert.equal(await agent.waiters(name), 0);
  const ac = new AbortController();
  const waiting = client.acquire(name, { wait: 60000, signal: ac.signal });
  const reason = new Error('shutting down');
  ac.abort(reason);
  await assert.rejects(waiting, (e) => e === reason);
  assert.equal(await agent.waiters(name), 0);
  await held.release();
});

test('an aborted signal rejects at once, sending nothing', async () => {
  const name = uniq('pre');
  const ac = new AbortController();
  ac.abort();
  await assert.rejects(client.acquire(name, { signal: ac.signal }), (e) => e.name === 'AbortError');
  assert.equal((await agent.leases(name)).length, 0);
  const lease = await client.acquire(name);
  await lease.release();
});

test('an abort after the grant changes nothing', async () => {
  const name = uniq('late');
  const ac = new AbortController();
  const lease = await client.acquire(name, { signal: ac.signal });
  ac.abort();
  assert.equal(lease.valid, true);
  await lease.release();
});

test('an abort racing the grant: either way no lease and no waiter is left behind', async () => {
  const name = uniq('race');
  for (let i = 0; i < 20; i++) {
    const held = await holder.acquire(name, { wait: 10000 });
    const ac = new AbortController();
    const waiting = client.acquire(name, { wait: 10000, signal: ac.signal });
    await waitFor(async () => (await agent.waiters(name)) === 1, 'the waiter');
    const released = held.release(); // the grant to the waiter and the cancel cross
    ac.abort();
    await released;
    await assert.rejects(waiting, (e) => e.name === 'AbortError');
    // a grant that crossed the cancel was released by the binding
    await waitFor(async () => (await agent.leases(name)).length === 0, 'no lease left');
  }
});
