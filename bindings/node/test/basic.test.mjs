import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startAgent, uniq, waitFor } from './helper.mjs';
import { Client, Lease, acquire, BusyError, TimeoutError, DlockError } from '../index.mjs';

let agent;
before(async () => {
  agent = await startAgent();
});
after(async () => {
  await agent?.stop();
});

test('acquire and release: the lease says what it holds', async () => {
  const client = await Client.open({ socket: agent.sock });
  const name = uniq('basic');
  const lease = await client.acquire(name, { ttl: 10000 });
  assert.ok(lease instanceof Lease);
  assert.equal(lease.name, name);
  assert.equal(lease.kind, 'exclusive');
  assert.equal(lease.ttl, 10000);
  assert.equal(lease.state, 'held');
  assert.equal(lease.holds, 1);
  assert.equal(typeof lease.fence, 'bigint');
  assert.ok(lease.fence > 0n);
  assert.equal(lease.valid, true);
  assert.ok(lease.remaining > 0 && lease.remaining <= 10000);
  assert.ok(lease.deadline > 0n);
  lease.check();
  lease.touch();
  const listed = await agent.leases(name);
  assert.equal(listed.length, 1);
  assert.equal(BigInt(listed[0].fence), lease.fence);
  await lease.release();
  assert.equal(lease.valid, false);
  assert.equal(lease.state, 'released');
  assert.equal(lease.remaining, 0);
  await lease.release(); // a second release does nothing
  assert.throws(() => lease.check(), (e) => e instanceof DlockError && e.code === 'ENOTFOUND');
  await waitFor(async () => (await agent.leases(name)).length === 0, 'the release in the agent');
  await client.close();
  assert.equal(client.closed, true);
});

test('try once: a held lock is busy', async () => {
  const a = await Client.open({ socket: agent.sock });
  const b = await Client.open({ socket: agent.sock });
  const name = uniq('busy');
  const held = await a.acquire(name);
  await assert.rejects(b.acquire(name), (e) => {
    assert.ok(e instanceof BusyError);
    assert.ok(e instanceof DlockError);
    assert.equal(e.code, 'EBUSY');
    assert.equal(e.errno, -7);
    assert.equal(e.lock, name);
    assert.match(e.message, /held/);
    return true;
  });
  await assert.rejects(b.acquire(name, { wait: 0 }), BusyError);
  await held.release();
  await a.close();
  await b.close();
});

test('wait: granted once the holder releases', async () => {
  const a = await Client.open({ socket: agent.sock });
  const b = await Client.open({ socket: agent.sock });
  const name = uniq('wait');
  const first = await a.acquire(name);
  let granted = false;
  const waiting = b.acquire(name, { wait: Infinity }).then((l) => {
    granted = true;
    return l;
  });
  await waitFor(async () => (await agent.waiters(name)) === 1, 'the waiter in the agent');
  assert.equal(granted, false);
  await first.release();
  const second = await waiting;
  assert.equal(second.valid, true);
  assert.ok(second.fence > first.fence, 'a later grant has a greater fence');
  await second.release();
  await a.close();
  await b.close();
});

test('timeout: the wait runs out while the lock stays held', async () => {
  const a = await Client.open({ socket: agent.sock });
  const b = await Client.open({ socket: agent.sock });
  const name = uniq('timeout');
  const held = await a.acquire(name);
  await assert.rejects(b.acquire(name, { wait: 200 }), (e) => {
    assert.ok(e instanceof TimeoutError);
    assert.equal(e.code, 'ETIMEDOUT');
    assert.equal(e.errno, -8);
    return true;
  });
  assert.equal(held.valid, true);
  assert.equal(await agent.waiters(name), 0, 'no waiter left after the timeout');
  await held.release();
  await a.close();
  await b.close();
});

test('fencing: every later grant of a name has a greater fence', async () => {
  const a = await Client.open({ socket: agent.sock });
  const b = await Client.open({ socket: agent.sock });
  const name = uniq('fence');
  let last = 0n;
  for (let i = 0; i < 10; i++) {
    const c = i % 2 ? a : b;
    const lease = await c.acquire(name, { wait: 10000 });
    assert.ok(lease.fence > last, `grant ${i}: ${lease.fence} > ${last}`);
    last = lease.fence;
    await lease.release();
  }
  await a.close();
  await b.close();
});

test('Symbol.asyncDispose releases the lease and closes the client', async () => {
  const client = await Client.open({ socket: agent.sock });
  const name = uniq('dispose');
  const lease = await client.acquire(name);
  await lease[Symbol.asyncDispose]();
  assert.equal(lease.valid, false);
  const again = await client.acquire(name); // the release came first on this connection
  assert.equal(again.valid, true);
  await client[Symbol.asyncDispose]();
  assert.equal(again.valid, false);
  assert.equal(again.state, 'released');
  await waitFor(async () => (await agent.leases(name)).length === 0, 'the close in the agent');
});

test('the process-wide client of acquire() uses $DLOCK_SOCKET', async () => {
  process.env.DLOCK_SOCKET = agent.sock;
  const name = uniq('default');
  const lease = await acquire(name, { ttl: 5000 });
  assert.equal(lease.valid, true);
  assert.equal(lease.client.socket, agent.sock);
  const other = await Client.open();
  await assert.rejects(other.acquire(name), BusyError);
  await lease.release();
  await lease.client.close();
  // a closed process-wide client is replaced by a new one on the next call
  const again = await acquire(name);
  assert.notEqual(again.client, lease.client);
  assert.equal(again.valid, true);
  await again.client.close();
  await other.close();
});

test('lease events reach the lease and the client: jeopardy, then lost, when not touched', async () => {
  const client = await Client.open({ socket: agent.sock });
  const name = uniq('stall');
  const lease = await client.acquire(name, { ttl: 1000, progress: 300 });
  const seen = [];
  client.on('event', (ev) => seen.push(`${ev.state}:${ev.reason?.code}`));
  const jeopardy = new Promise((r) => lease.once('jeopardy', r));
  const lost = new Promise((r) => lease.once('lost', r));
  const why = await jeopardy;
  assert.equal(why.code, 'ESTALLED');
  const err = await lost;
  assert.equal(err.code, 'ELOST');
  assert.equal(err.reason, 'ESTALLED');
  assert.equal(lease.valid, false);
  assert.equal(lease.state, 'lost');
  assert.deepEqual(seen, ['jeopardy:ESTALLED', 'lost:ELOST']);
  await assert.rejects(lease.release(), (e) => e.code === 'ELOST');
  await client.close();
});

test('touch keeps a lease with a progress deadline held', async () => {
  const client = await Client.open({ socket: agent.sock });
  const name = uniq('touch');
  const lease = await client.acquire(name, { ttl: 1000, progress: 1500 });
  let jeopardy = false;
  lease.on('jeopardy', () => (jeopardy = true));
  // touch for three of its TTLs, then stop: only then does it stall
  const end = Date.now() + 3000;
  while (Date.now() < end) {
    lease.touch();
    await new Promise((r) => setTimeout(r, 50));
  }
  assert.equal(jeopardy, false);
  assert.equal(lease.valid, true);
  const why = await new Promise((r) => lease.once('jeopardy', r));
  assert.equal(why.code, 'ESTALLED');
  await client.close();
});
