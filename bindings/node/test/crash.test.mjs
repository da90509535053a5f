import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { startAgent, uniq, waitFor } from './helper.mjs';
import { Client } from '../index.mjs';

const INDEX = fileURLToPath(new URL('../index.mjs', import.meta.url));

let agent;
before(async () => {
  agent = await startAgent();
});
after(async () => {
  await agent?.stop();
});

test('a child killed with SIGKILL while holding: the waiting parent is granted', async () => {
  const name = uniq('crash');
  const script = `
    import { Client } from ${JSON.stringify(INDEX)};
    const client = await Client.open({ socket: ${JSON.stringify(agent.sock)} });
    const lease = await client.acquire(${JSON.stringify(name)}, { ttl: 30000 });
    process.stdout.write('held ' + lease.fence + '\\n');
    setInterval(() => {}, 1000);
  `;
  const child = spawn(process.execPath, ['--input-type=module', '-e', script], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const exited = new Promise((r) => child.once('exit', (code, sig) => r(sig)));
  try {
    const childFence = await new Promise((resolve, reject) => {
      let out = '';
      child.stdout.on('data', (d) => {
        out += d;
        const m = /held (\d+)\n/.exec(out);
        if (m) resolve(BigInt(m[1]));
      });
      child.once('exit', () => reject(new Error(`the child exited: ${out}`)));
    });
    const client = await Client.open({ socket: agent.sock });
    // with a TTL of 30 s, the grant within the wait comes from the agent seeing the child's
    // connection close, not from the key expiring
    const waiting = client.acquire(name, { wait: 25000 });
    await waitFor(async () => (await agent.waiters(name)) === 1, 'the parent waiting');
    child.kill('SIGKILL');
    assert.equal(await exited, 'SIGKILL');
    const lease = await waiting;
    assert.equal(lease.valid, true);
    assert.ok(lease.fence > childFence);
    await lease.release();
    await client.close();
  } finally {
    child.kill('SIGKILL');
  }
});
