// Agent restarts (docs/restarts.md): an agent with a state directory (its default) leaves its
// leases to the next agent started on the same configuration, and libdlock takes the connection
// back. While it does, the client's descriptor is a timerfd, then the new connection's socket:
// the binding must have it watched, or nothing is dispatched again.
import { test, afterEach } from 'node:test';
import assert from 'node:assert/strict';
import { startAgent, uniq, waitFor } from './helper.mjs';
import { Client, DlockError } from '../index.mjs';

const EVENT_MS = 30000;
let own = null;
const clients = [];
afterEach(async () => {
  for (const c of clients.splice(0)) await c.close();
  await own?.stop();
  own = null;
});

async function open() {
  const c = await Client.open({ socket: own.sock });
  clients.push(c);
  return c;
}

// Records a lease's events in order; next() resolves with the next one, or rejects after ms.
function recorder(lease) {
  const events = [];
  let wake = null;
  for (const state of ['held', 'jeopardy', 'lost']) {
    lease.on(state, (reason) => {
      events.push({ state, reason });
      wake?.();
    });
  }
  return {
    events,
    async next(ms = EVENT_MS) {
      if (!events.length) {
        let t;
        await new Promise((resolve, reject) => {
          wake = resolve;
          t = setTimeout(() => reject(new Error(`no event within ${ms} ms`)), ms);
        }).finally(() => {
          wake = null;
          clearTimeout(t);
        });
      }
      return events.shift();
    },
    // the HELD that ends a restart's JEOPARDY: a JEOPARDY on the way (the next agent checking
    // the key) is fine, a LOST is not
    async heldAgain() {
      for (;;) {
        const ev = await this.next();
        if (ev.state === 'held') {
          assert.equal(ev.reason, null);
          return;
        }
        assert.equal(ev.state, 'jeopardy', `while the agent restarts: ${ev.state} ${ev.reason?.code}`);
      }
    },
  };
}

// Reads lease.valid every millisecond until stopped; stop() returns { invalid, reads }.
function sampleValid(lease) {
  const s = { invalid: 0, reads: 0 };
  const read = () => {
    s.reads++;
    if (!lease.valid) s.invalid++;
  };
  read();
  const timer = setInterval(read, 1);
  return () => {
    clearInterval(timer);
    read();
    return s;
  };
}

test('a lease survives kill -9 of the agent and a new agent: valid throughout, jeopardy (ERESTART) then held; its release frees the lock', async () => {
  own = await startAgent();
  const client = await open();
  const name = uniq('restart');
  const lease = await client.acquire(name, { ttl: 30000 });
  const fence = lease.fence;
  const rec = recorder(lease);
  const clientEvents = [];
  client.on('event', (ev) => clientEvents.push(ev));
  const stopSampling = sampleValid(lease);

  await own.kill9();
  const ev = await rec.next();
  assert.equal(ev.state, 'jeopardy');
  assert.ok(ev.reason instanceof DlockError);
  assert.equal(ev.reason.code, 'ERESTART');
  assert.equal(ev.reason.errno, -31);
  assert.deepEqual(clientEvents.map((e) => [e.lease, e.state, e.reason?.code]),
    [[lease, 'jeopardy', 'ERESTART']]);
  assert.equal(lease.valid, true);
  assert.equal(lease.state, 'jeopardy');
  lease.check();

  await own.start();
  await rec.heldAgain();
  const { invalid, reads } = stopSampling();
  assert.equal(invalid, 0, `the lease read invalid ${invalid} times in ${reads} readings`);
  assert.equal(lease.valid, true);
  assert.equal(lease.state, 'held');
  assert.equal(lease.fence, fence);
  assert.deepEqual((await own.leases(name)).map((l) => [l.name, BigInt(l.fence)]), [[name, fence]]);

  await lease.release();
  const other = await open();
  const next = await other.acquire(name, { wait: 20000 });
  assert.equal(next.valid, true);
  assert.ok(next.fence > fence);
  await next.release();
  assert.deepEqual(rec.events, [], 'no event after the release');
});

test('an acquire waiting forever while the agent is killed and replaced is granted once the holder releases', async () => {
  own = await startAgent();
  const holder = await open();
  const waiter = await open();
  const name = uniq('restart-wait');
  const held = await holder.acquire(name, { ttl: 30000 });
  const rec = recorder(held);
  let settled = false;
  const waiting = waiter.acquire(name, { wait: Infinity });
  waiting.then(() => (settled = true), () => (settled = true));
  await waitFor(async () => (await own.waiters(name)) === 1, 'the acquire waiting in the agent');

  await own.kill9();
  const ev = await rec.next();
  assert.equal(ev.state, 'jeopardy');
  assert.equal(ev.reason.code, 'ERESTART');
  await own.start();
  await rec.heldAgain();
  // the acquire, sent again, waits in the new agent
  await waitFor(async () => (await own.waiters(name)) === 1, 'the acquire waiting in the new agent');
  assert.equal(settled, false, 'the waiting acquire ended while the lock was held');
  assert.equal(held.valid, true);

  await held.release();
  const lease = await waiting;
  assert.equal(lease.valid, true);
  assert.ok(lease.fence > held.fence);
  await lease.release();
});

test('a client with nothing held follows a restart too: the next acquire works', async () => {
  own = await startAgent();
  const client = await open();
  const name = uniq('restart-idle');
  await (await client.acquire(name)).release();
  await own.kill9();
  await own.start();
  const lease = await client.acquire(name, { wait: 20000 });
  assert.equal(lease.valid, true);
  await lease.release();
});
