// An agent that does not answer (stopped with SIGSTOP): acquires give up with ENOANSWER.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { startAgent, uniq, waitFor, NO_STATE_DIR } from './helper.mjs';
import { Client, ConnectionError } from '../index.mjs';

const INDEX = fileURLToPath(new URL('../index.mjs', import.meta.url));

let agent;
before(async () => {
  agent = await startAgent();
});
after(async () => {
  agent?.agent.kill('SIGCONT');
  await agent?.stop();
});

// the state letter of /proc/PID/stat ('T': stopped)
function procState(pid) {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[0];
}

// p, or a rejection with 'still pending' after ms
function bounded(p, ms) {
  let t;
  const late = new Promise((_, reject) => {
    t = setTimeout(() => reject(new Error('still pending')), ms);
  });
  return Promise.race([p, late]).finally(() => clearTimeout(t));
}

test('a stopped agent: acquires reject with ENOANSWER after their wait and 10 s, keep no process alive, and leave nothing behind', async () => {
  const holder = await Client.open({ socket: agent.sock });
  const client = await Client.open({ socket: agent.sock });
  const free = uniq('free'); // granted once the agent goes on: the binding gives it back
  const busy = uniq('busy'); // waited for: the wait is cancelled
  const held = await holder.acquire(busy);

  // a child process whose only business is one acquire: it must exit once that gave up
  const script = `import { Client } from ${JSON.stringify(INDEX)};
    const client = await Client.open({ socket: ${JSON.stringify(agent.sock)} });
    const say = (s) => process.stdout.write(s + '\\n');
    const keep = setInterval(() => {}, 1000);
    process.once('SIGUSR2', () => {
      clearInterval(keep);
      client.acquire(${JSON.stringify(uniq('child'))}, { wait: 100 })
        .then(() => say('granted'), (e) => say(e.code));
    });
    say('open');`;
  const proc = spawn(process.execPath, ['--input-type=module', '-e', script],
    { stdio: ['ignore', 'pipe', 'inherit'] });
  let out = '';
  proc.stdout.on('data', (d) => (out += d));
  const kill = setTimeout(() => proc.kill('SIGKILL'), 90000); // a child that never exits
  const exited = new Promise((r) => proc.once('close', (code, signal) => {
    clearTimeout(kill);
    r({ code, signal });
  }));

  try {
    await waitFor(() => out.includes('open\n'), 'the child\'s client');
    agent.agent.kill('SIGSTOP');
    await waitFor(() => procState(agent.agent.pid) === 'T', 'the agent stopped');
    const pFree = client.acquire(free, { wait: 200 });
    const pBusy = client.acquire(busy, { wait: 200 });
    proc.kill('SIGUSR2');
    const noAnswer = (name) => (e) => e instanceof ConnectionError && e.code === 'ENOANSWER' &&
      e.errno === -26 && e.lock === name;
    await assert.rejects(bounded(pFree, 60000), noAnswer(free));
    await assert.rejects(bounded(pBusy, 60000), noAnswer(busy));
    const child = await exited;
    assert.equal(child.signal, null, 'the child exited by itself (it was not killed)');
    assert.equal(child.code, 0);
    assert.equal(out, 'open\nENOANSWER\n');
    assert.equal(procState(agent.agent.pid), 'T', 'the agent was stopped all along');
  } finally {
    agent.agent.kill('SIGCONT');
    proc.kill('SIGKILL');
  }

  // The agent handles a connection's frames in order: once an acquire sent now is answered,
  // it has handled both acquires and their cancels, and a grant that crossed was released.
  const probe = await client.acquire(uniq('probe'), { wait: 10000 });
  await probe.release();
  assert.equal(await agent.waiters(busy), 0, 'the cancelled wait left no waiter');
  await waitFor(async () => (await agent.leases(free)).length === 0, 'no lease of the given-up acquire');
  await held.release();
  await waitFor(async () => (await agent.leases(busy)).length === 0, 'nothing granted to the given-up wait');
  const again = await client.acquire(free);
  await again.release();
  await client.close();
  await holder.close();
});

test('a stopped agent without a state directory and a full socket: the acquire that finds no room gives up (after 5 s) and the client is broken', async () => {
  // (with a state directory, the client takes the broken connection for a restart, and tries
  // to take it back from the agent, which answers once it goes on)
  const agent = await startAgent({ config: NO_STATE_DIR });
  const client = await Client.open({ socket: agent.sock });
  const lease = await client.acquire(uniq('kept'));
  const lost = new Promise((r) => lease.once('lost', r));
  const disconnected = new Promise((r) => client.once('disconnect', r));
  const base = uniq('full');
  agent.agent.kill('SIGSTOP');
  try {
    await waitFor(() => procState(agent.agent.pid) === 'T', 'the agent stopped');
    // far more than the socket takes: one of them finds it full, waits for room in
    // dlock_lease_acquire_spec_async(), then counts the agent as gone; the rest fail at once
    const pending = [];
    for (let i = 0; i < 5000; i++) {
      pending.push(client.acquire(`${base}:${'x'.repeat(150)}:${i}`, { wait: 60000 }).catch((e) => e));
    }
    assert.equal((await bounded(disconnected, 30000)).code, 'EDISCONNECTED');
    assert.equal((await bounded(lost, 30000)).reason, 'EDISCONNECTED');
    const errs = await Promise.all(pending);
    assert.ok(errs.every((e) => e instanceof ConnectionError && e.code === 'EDISCONNECTED'),
      `${[...new Set(errs.map((e) => e.code))]}`);
  } finally {
    agent.agent.kill('SIGCONT');
    await client.close();
    await agent.stop();
  }
});
