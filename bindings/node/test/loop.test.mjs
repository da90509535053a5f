// The event loop and the client: what keeps a process alive, and what a child inherits.
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

// Runs a module in a child node with a client open; resolves with { code, signal, lines } at
// its exit. onLine(line) is called for each line it prints.
function child(body, onLine = () => {}) {
  const script = `import { Client } from ${JSON.stringify(INDEX)};
    const client = await Client.open({ socket: ${JSON.stringify(agent.sock)} });
    const say = (s) => process.stdout.write(s + '\\n');
    ${body}`;
  const proc = spawn(process.execPath, ['--input-type=module', '-e', script], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const lines = [];
  let out = '';
  proc.stdout.on('data', (d) => {
    out += d;
    for (let i; (i = out.indexOf('\n')) >= 0; out = out.slice(i + 1)) {
      lines.push(out.slice(0, i));
      onLine(out.slice(0, i));
    }
  });
  const kill = setTimeout(() => proc.kill('SIGKILL'), 60000); // a child that never exits
  return new Promise((resolve) => proc.once('close', (code, signal) => {
    clearTimeout(kill);
    resolve({ code, signal, lines });
  }));
}

test('an open client with nothing held or pending keeps no process alive', async () => {
  const name = uniq('idle');
  const r = await child(`
    const lease = await client.acquire(${JSON.stringify(name)});
    await lease.release();
    say('done');
  `);
  assert.equal(r.signal, null, 'the child exited by itself (it was not killed)');
  assert.equal(r.code, 0);
  assert.deepEqual(r.lines, ['done']);
});

test('a held lease keeps the process alive until it is released', async () => {
  const name = uniq('alive');
  // the timer is unref'd: only the lease can keep the process alive until it fires
  const r = await child(`
    const lease = await client.acquire(${JSON.stringify(name)});
    say('held');
    setTimeout(async () => { await lease.release(); say('released'); }, 300).unref();
  `);
  assert.equal(r.code, 0);
  assert.deepEqual(r.lines, ['held', 'released']);
});

test('a pending acquire keeps the process alive until it is granted', async () => {
  const name = uniq('pending');
  const holder = await Client.open({ socket: agent.sock });
  const held = await holder.acquire(name);
  let released = false;
  const r = await child(`
    say('waiting');
    const lease = await client.acquire(${JSON.stringify(name)}, { wait: Infinity });
    say('granted');
    await lease.release();
  `, (line) => {
    if (line !== 'waiting' || released) return;
    released = true;
    waitFor(async () => (await agent.waiters(name)) === 1, 'the child waiting')
      .then(() => held.release());
  });
  assert.equal(r.code, 0);
  assert.deepEqual(r.lines, ['waiting', 'granted']);
  await holder.close();
});

test('a child process does not inherit the connection: close releases at once', async () => {
  const client = await Client.open({ socket: agent.sock });
  const name = uniq('cloexec');
  await client.acquire(name, { ttl: 30000 });
  const sleeper = spawn('sleep', ['60'], { stdio: 'ignore' });
  try {
    await client.close();
    // with the connection's fd inherited, the agent would see it open until the sleeper exits
    await waitFor(async () => (await agent.leases(name)).length === 0, 'the release at close');
  } finally {
    sleeper.kill('SIGKILL');
  }
});

test('a burst of acquires larger than the socket buffers: every one completes', async () => {
  const client = await Client.open({ socket: agent.sock });
  const base = uniq('burst');
  const N = 4000;
  const names = Array.from({ length: N }, (_, i) => `${base}:${'x'.repeat(150)}:${i}`);
  const results = await Promise.allSettled(names.map((nm) => client.acquire(nm, { ttl: 30000 })));
  const leases = results.filter((r) => r.status === 'fulfilled').map((r) => r.value);
  const failed = results.filter((r) => r.status === 'rejected').map((r) => r.reason.code);
  // every acquire was answered: granted, or refused by a limit of the agent
  assert.equal(leases.length + failed.length, N);
  assert.ok(failed.every((c) => c === 'ELIMIT'), `unexpected errors: ${[...new Set(failed)]}`);
  assert.ok(leases.length > 0);
  await Promise.all(leases.map((l) => l.release()));
  await client.close();
});
