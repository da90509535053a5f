// The process-wide client of acquire() when its agent goes away for good (an agent without a
// state directory): the old one is closed. (Across a restart of an agent with one, the client
// goes on: restart.test.mjs.)
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { startAgent, uniq, waitFor, NO_STATE_DIR } from './helper.mjs';
import { acquire, LostError } from '../index.mjs';

const agents = [];
after(async () => {
  for (const a of agents) await a.stop();
});

// What an open libdlock client has in this process: the agent's lease page and touch page,
// each mapped once (this file opens no other client).
const pages = () => readFileSync('/proc/self/maps', 'utf8').split('\n')
  .filter((l) => l.includes('/memfd:dlock-')).length;

test('the process-wide client dropped after its agent went away is closed once nothing of it is held', async () => {
  const first = await startAgent({ config: NO_STATE_DIR });
  agents.push(first);
  assert.equal(pages(), 0);
  process.env.DLOCK_SOCKET = first.sock;
  const lease = await acquire(uniq('restart'), { ttl: 30000 });
  const client = lease.client;
  assert.equal(pages(), 2);
  const lost = new Promise((r) => lease.once('lost', r));
  const disconnected = new Promise((r) => client.once('disconnect', r));
  await first.stop(); // the agent goes away: the lease is lost, the client dropped
  assert.ok((await lost) instanceof LostError);
  await disconnected;
  assert.equal(client.closed, false, 'a lease of it is still in the program\'s hands');
  assert.equal(pages(), 2);
  await assert.rejects(lease.release(), LostError); // the last one: the client is closed
  assert.equal(client.closed, true);
  assert.equal(pages(), 0);

  // nothing held when the agent goes away: closed at once
  const second = await startAgent({ config: NO_STATE_DIR });
  agents.push(second);
  process.env.DLOCK_SOCKET = second.sock;
  const l2 = await acquire(uniq('restart'));
  assert.notEqual(l2.client, client);
  await l2.release();
  assert.equal(l2.client.closed, false);
  assert.equal(pages(), 2);
  await second.stop();
  await waitFor(() => l2.client.closed, 'the dropped client closed');
  assert.equal(pages(), 0);

  // and acquire() opens another
  const third = await startAgent({ config: NO_STATE_DIR });
  agents.push(third);
  process.env.DLOCK_SOCKET = third.sock;
  const l3 = await acquire(uniq('restart'));
  assert.equal(l3.valid, true);
  assert.equal(pages(), 2);
  await l3.release();
  await l3.client.close();
  assert.equal(pages(), 0);
});
