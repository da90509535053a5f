import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startAgent, uniq, waitFor } from './helper.mjs';
import { Client, BusyError, KindError, HeldError } from '../index.mjs';

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

test('shared: readers hold together, a writer waits for both', async () => {
  const name = uniq('rw');
  const r1 = await a.acquire(name, { kind: 'shared' });
  const r2 = await b.acquire(name, { kind: 'shared' });
  assert.equal(r1.kind, 'shared');
  assert.ok(r1.valid && r2.valid);
  const w = await Client.open({ socket: agent.sock });
  await assert.rejects(w.acquire(name), BusyError);
  const writer = w.acquire(name, { wait: 20000 });
  await waitFor(async () => (await agent.waiters(name)) === 1, 'the writer waiting');
  await r1.release();
  assert.equal(await agent.waiters(name), 1, 'one reader still holds');
  await r2.release();
  const wl = await writer;
  assert.equal(wl.kind, 'exclusive');
  await assert.rejects(a.acquire(name, { kind: 'shared' }), BusyError);
  await wl.release();
  await w.close();
});

test('semaphore: at most `permits` holders; other permits are a KindError', async () => {
  const name = uniq('sem');
  const c = await Client.open({ socket: agent.sock });
  const p1 = await a.acquire(name, { kind: 'semaphore', permits: 2 });
  const p2 = await b.acquire(name, { kind: 'semaphore', permits: 2 });
  assert.equal(p1.kind, 'semaphore');
  await assert.rejects(c.acquire(name, { kind: 'semaphore', permits: 2 }), BusyError);
  await assert.rejects(c.acquire(name, { kind: 'semaphore', permits: 3 }), (e) => {
    assert.ok(e instanceof KindError);
    assert.equal(e.code, 'EKIND');
    return true;
  });
  await assert.rejects(c.acquire(name, { kind: 'shared' }), KindError);
  const third = c.acquire(name, { kind: 'semaphore', permits: 2, wait: 20000 });
  await p1.release();
  const p3 = await third;
  assert.ok(p3.valid && p2.valid);
  await p2.release();
  await p3.release();
  await c.close();
});

test('re-entrant: the same owner takes the name again, the same lease, one more hold', async () => {
  const name = uniq('re');
  const first = await a.acquire(name, { reentrant: true, owner: 7 });
  const second = await a.acquire(name, { reentrant: true, owner: 7n });
  assert.equal(second.fence, first.fence);
  assert.equal(first.holds, 2);
  assert.equal(second.holds, 2);
  // another owner on the same client waits like anyone, and so does a plain acquire
  await assert.rejects(a.acquire(name, { reentrant: true, owner: 8 }), BusyError);
  await assert.rejects(a.acquire(name), BusyError);
  // the owner may not re-enter as another kind
  await assert.rejects(a.acquire(name, { reentrant: true, owner: 7, kind: 'shared' }),
    (e) => e instanceof HeldError && e.code === 'EHELD');
  await assert.rejects(b.acquire(name), BusyError);
  await second.release();
  assert.equal(first.valid, true);
  assert.equal(first.holds, 1);
  assert.equal(second.valid, false);
  await assert.rejects(b.acquire(name), BusyError);
  await first.release();
  const other = await b.acquire(name, { wait: 10000 });
  assert.ok(other.fence > first.fence);
  await other.release();
});

test('one client: plain shared acquires hold together, semaphore acquires count permits', async () => {
  const name = uniq('rw1');
  const r1 = await a.acquire(name, { kind: 'shared' });
  const r2 = await a.acquire(name, { kind: 'shared' });
  assert.ok(r1.valid && r2.valid);
  assert.notEqual(r1, r2);
  await assert.rejects(a.acquire(name), BusyError);
  await r1.release();
  await r2.release();

  const sem = uniq('sem1');
  const p1 = await a.acquire(sem, { kind: 'semaphore', permits: 2 });
  const p2 = await a.acquire(sem, { kind: 'semaphore', permits: 2 });
  await assert.rejects(a.acquire(sem, { kind: 'semaphore', permits: 2 }), BusyError);
  const third = a.acquire(sem, { kind: 'semaphore', permits: 2, wait: 20000 });
  await waitFor(async () => (await agent.waiters(sem)) === 1, 'the third waiting');
  await p2.release();
  const p3 = await third;
  assert.ok(p1.valid && p3.valid);
  await p1.release();
  await p3.release();
});
