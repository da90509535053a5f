import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { createRequire } from 'node:module';
import { startAgent, uniq, NO_STATE_DIR } from './helper.mjs';
import { Client, DlockError, InvalidNameError, ConnectionError, LostError } from '../index.mjs';

const require = createRequire(import.meta.url);

let agent;
before(async () => {
  agent = await startAgent();
});
after(async () => {
  await agent?.stop();
});

test('a name longer than the agent allows (200 bytes) is an InvalidNameError ENAMETOOLONG', async () => {
  const client = await Client.open({ socket: agent.sock });
  const ok = await client.acquire('n'.repeat(200));
  await ok.release();
  await assert.rejects(client.acquire('n'.repeat(201)), (e) => {
    assert.ok(e instanceof InvalidNameError);
    assert.ok(e instanceof DlockError);
    assert.equal(e.code, 'ENAMETOOLONG');
    assert.equal(e.errno, -9);
    assert.match(e.message, /too long/);
    return true;
  });
  await client.close();
});

test('an empty name, or one with a NUL or a space, is an InvalidNameError EBADNAME', async () => {
  const client = await Client.open({ socket: agent.sock });
  for (const bad of ['', 'a\0b', 'a b']) {
    await assert.rejects(client.acquire(bad), (e) => {
      assert.ok(e instanceof InvalidNameError, JSON.stringify(bad));
      assert.equal(e.code, 'EBADNAME');
      assert.equal(e.errno, -10);
      return true;
    });
  }
  await assert.rejects(client.acquire(42), TypeError);
  await client.close();
});

test('bad options are refused before anything is sent', async () => {
  const client = await Client.open({ socket: agent.sock });
  const name = uniq('opts');
  await assert.rejects(client.acquire(name, { wait: -1 }), RangeError);
  await assert.rejects(client.acquire(name, { wait: 1.5 }), RangeError);
  await assert.rejects(client.acquire(name, { ttl: -5 }), RangeError);
  await assert.rejects(client.acquire(name, { kind: 'mutex' }), RangeError);
  await assert.rejects(client.acquire(name, { kind: 'semaphore' }), RangeError);
  await assert.rejects(client.acquire(name, { kind: 'shared', permits: 2 }), RangeError);
  await assert.rejects(client.acquire(name, { owner: -1 }), RangeError);
  assert.equal((await agent.leases(name)).length, 0);
  await client.close();
});

test('agent down: opening a socket with no agent is a ConnectionError ECONNECT', async () => {
  const socket = path.join(agent.dir, 'nobody.sock');
  await assert.rejects(Client.open({ socket }), (e) => {
    assert.ok(e instanceof ConnectionError);
    assert.equal(e.code, 'ECONNECT');
    assert.equal(e.errno, -3);
    assert.ok(e.message.includes(socket));
    return true;
  });
});

test('a closed client refuses acquires; its pending acquires are rejected by the close', async () => {
  const holder = await Client.open({ socket: agent.sock });
  const client = await Client.open({ socket: agent.sock });
  const name = uniq('closed');
  const held = await holder.acquire(name);
  const pending = client.acquire(name, { wait: Infinity });
  const closing = client.close();
  await assert.rejects(pending, (e) => e instanceof ConnectionError && e.code === 'EDISCONNECTED');
  await closing;
  await assert.rejects(client.acquire(name), ConnectionError);
  await client.close(); // again: nothing
  await held.release();
  await holder.close();
});

test('an agent without a state directory going away: leases are lost, the client says disconnect', async () => {
  // (an agent with one leaves its leases to the next agent: restart.test.mjs)
  const own = await startAgent({ config: NO_STATE_DIR });
  const client = await Client.open({ socket: own.sock });
  const lease = await client.acquire(uniq('gone'));
  const lost = new Promise((r) => lease.once('lost', r));
  const disconnect = new Promise((r) => client.once('disconnect', r));
  own.agent.kill('SIGKILL');
  const err = await lost;
  assert.equal(err.code, 'ELOST');
  assert.equal(err.reason, 'EDISCONNECTED');
  assert.equal((await disconnect).code, 'EDISCONNECTED');
  assert.equal(lease.valid, false);
  assert.throws(() => lease.check(), (e) => e.code === 'ELOST');
  await assert.rejects(client.acquire(uniq('gone')), ConnectionError);
  await assert.rejects(lease.release(), DlockError);
  await client.close();
  await own.stop();
});

test('the error of a failed acquire names its lock, whatever its code (ELOST too)', () => {
  const { errorFor, ERRNO } = require('../lib/errors.cjs');
  for (const errno of [ERRNO.ELOST, ERRNO.EBUSY, ERRNO.EBACKEND]) {
    const err = errorFor(errno, 'words', { lock: 'orders:42' });
    assert.equal(err.lock, 'orders:42', `${err.code}`);
    assert.equal(err.errno, errno);
    assert.equal(err.message, 'words');
  }
  const lost = errorFor(ERRNO.ELOST, 'words', { lock: 'orders:42' });
  assert.ok(lost instanceof LostError);
  assert.equal(lost.reason, 'ELOST');
});
