import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startAgent, uniq, redis } from './helper.mjs';
import { Client, LostError } from '../index.mjs';

let agent;
before(async () => {
  agent = await startAgent();
});
after(async () => {
  await agent?.stop();
});

test('LOST after the key is deleted in Redis: the event, then the error at the next check', async () => {
  const client = await Client.open({ socket: agent.sock });
  const name = uniq('lost');
  const lease = await client.acquire(name, { ttl: 1000 });
  assert.equal(await redis(agent.redisSock, 'EXISTS', `dlock:${name}`), ':1');
  const lost = new Promise((r) => lease.once('lost', r));
  const onClient = new Promise((r) => client.on('event', (ev) => ev.state === 'lost' && r(ev)));
  assert.equal(await redis(agent.redisSock, 'DEL', `dlock:${name}`), ':1');
  const err = await lost;
  assert.ok(err instanceof LostError);
  assert.equal(err.code, 'ELOST');
  assert.equal(err.errno, -13);
  const ev = await onClient;
  assert.equal(ev.lease, lease);
  assert.equal(ev.reason, err);
  assert.equal(lease.valid, false);
  assert.equal(lease.state, 'lost');
  assert.equal(lease.remaining, 0);
  assert.throws(() => lease.check(), (e) => e === err);
  await assert.rejects(lease.release(), (e) => e instanceof LostError);
  assert.equal(lease.state, 'lost');
  // the name is free again, with a greater fence
  const again = await client.acquire(name);
  assert.ok(again.fence > lease.fence);
  await again.release();
  await client.close();
});
