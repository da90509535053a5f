// Starts a private redis-server and dlockd for a test file, each in a fresh temp dir, and
// finds the binaries: $DLOCKD, $DLOCKCTL, $DLOCK_LIBRARY, else under $DLOCK_BUILD_DIR.
import { spawn, execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import net from 'node:net';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

const BUILD = process.env.DLOCK_BUILD_DIR;
function binary(envName, rel) {
  if (process.env[envName]) return process.env[envName];
  if (!BUILD) throw new Error(`set DLOCK_BUILD_DIR (or ${envName})`);
  return path.join(BUILD, rel);
}
export const DLOCKD = binary('DLOCKD', 'agent/dlockd');
export const DLOCKCTL = binary('DLOCKCTL', 'tools/dlockctl');
process.env.DLOCK_LIBRARY = binary('DLOCK_LIBRARY', 'libclient/libdlock.so.0');
export const REDIS_SERVER = process.env.REDIS_SERVER || 'redis-server';

const DEADLINE_MS = 20000;
const children = new Set();
process.on('exit', () => {
  for (const c of children) c.kill('SIGKILL');
});

/** Polls fn() until it returns a truthy value, or throws after ms. */
export async function waitFor(fn, what, ms = DEADLINE_MS) {
  const end = Date.now() + ms;
  let last;
  for (;;) {
    try {
      const v = await fn();
      if (v) return v;
    } catch (err) {
      last = err;
    }
    if (Date.now() > end) {
      throw new Error(`timed out waiting for ${what}${last ? `: ${last.message}` : ''}`);
    }
    await sleep(20);
  }
}

/** Sends one command to Redis on a unix socket, returns the raw reply. */
export function redis(sock, ...args) {
  return new Promise((resolve, reject) => {
    const s = net.createConnection(sock);
    let out = '';
    s.setTimeout(10000, () => s.destroy(new Error('redis: no answer')));
    s.on('connect', () => {
      s.write(`*${args.length}\r\n` + args.map((a) => `$${Buffer.byteLength(a)}\r\n${a}\r\n`).join(''));
    });
    s.on('data', (d) => {
      out += d;
      if (out.endsWith('\r\n')) {
        s.end();
        resolve(out.trim());
      }
    });
    s.on('error', reject);
  });
}

function canConnect(sock) {
  return new Promise((resolve) => {
    const s = net.createConnection(sock);
    s.on('connect', () => {
      s.destroy();
      resolve(true);
    });
    s.on('error', () => resolve(false));
  });
}

/** Runs dlockctl, resolves with its stdout. */
export function ctl(args) {
  return new Promise((resolve, reject) => {
    execFile(DLOCKCTL, args, { timeout: 10000 }, (err, stdout, stderr) =>
      err ? reject(new Error(`dlockctl ${args.join(' ')}: ${err.message} ${stderr}`)) : resolve(stdout));
  });
}

function start(cmd, args, opts) {
  const child = spawn(cmd, args, { stdio: ['ignore', 'ignore', 'pipe'], ...opts });
  let log = '';
  child.stderr.on('data', (d) => {
    log = (log + d).slice(-4000);
  });
  child.log = () => log;
  children.add(child);
  child.on('exit', () => children.delete(child));
  return child;
}

async function stop(child) {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const gone = new Promise((r) => child.once('exit', r));
  child.kill('SIGTERM');
  const t = setTimeout(() => child.kill('SIGKILL'), 5000);
  await gone;
  clearTimeout(t);
}

/** dlockd's configuration without a state directory: its leases, and its clients' connections,
 * end with its process (with one, the default, they go on with the next agent). */
export const NO_STATE_DIR = '[agent]\nstate_dir =\n';

/**
 * Starts redis-server and dlockd in a fresh temp dir. `config`: extra INI text for dlockd
 * (e.g. "[agent]\nmax_name_len = 100"). Returns { dir, sock, redisSock, agent, leases(),
 * kill9(), start(), stop() }: kill9() kills dlockd with SIGKILL, start() starts a new one on the
 * same configuration (which takes over the leases the dead one left in its state directory).
 */
export async function startAgent({ config } = {}) {
  const dir = mkdtempSync(path.join(tmpdir(), 'dlock-node-'));
  const redisSock = path.join(dir, 'redis.sock');
  const sock = path.join(dir, 'dlock.sock');
  const redisProc = start(REDIS_SERVER, ['--port', '0', '--unixsocket', redisSock, '--save', '',
    '--appendonly', 'no', '--dir', dir], { cwd: dir });
  await waitFor(async () => (await redis(redisSock, 'PING')) === '+PONG', 'redis-server');
  const args = ['-s', sock, '-r', `unix:${redisSock}`];
  if (config) {
    writeFileSync(path.join(dir, 'dlockd.conf'), config);
    args.push('-c', path.join(dir, 'dlockd.conf'));
  }
  const launch = async () => {
    const agent = start(DLOCKD, args, { cwd: dir });
    try {
      await waitFor(() => {
        if (agent.exitCode !== null) throw new Error(`dlockd exited: ${agent.log()}`);
        return canConnect(sock);
      }, 'dlockd');
      // ready once it has its Redis connection (a try-once acquire would get EUNAVAIL before)
      await waitFor(async () => {
        const st = JSON.parse(await ctl(['-s', sock, 'status', '--json']));
        return st.nodes.length > 0 && st.nodes.every((node) => node.connected);
      }, 'dlockd connected to Redis');
    } catch (err) {
      await stop(agent);
      throw err;
    }
    return agent;
  };
  let agent;
  try {
    agent = await launch();
  } catch (err) {
    await stop(redisProc);
    throw err;
  }
  return {
    dir,
    sock,
    redisSock,
    agent,
    /** Kills dlockd with SIGKILL; resolves once it is gone. */
    async kill9() {
      const a = this.agent;
      if (a.exitCode !== null || a.signalCode !== null) return;
      const gone = new Promise((r) => a.once('exit', r));
      a.kill('SIGKILL');
      await gone;
    },
    /** Starts dlockd again on the same configuration; resolves once it is ready. */
    async start() {
      this.agent = await launch();
    },
    /** The agent's leases (`dlockctl leases --json`), of `pattern` if given. */
    async leases(pattern) {
      const args2 = ['-s', sock, 'leases', '--json'];
      if (pattern) args2.push(pattern);
      return JSON.parse(await ctl(args2)).leases;
    },
    /** The local waiters the agent has queued for `name` (0 when nobody holds it). */
    async waiters(name) {
      const ls = await this.leases(name);
      return ls.reduce((m, l) => Math.max(m, l.waiters), 0);
    },
    async stop() {
      await stop(this.agent);
      await stop(redisProc);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** A name no other test uses. */
let seq = 0;
export function uniq(prefix = 't') {
  return `${prefix}:${process.pid}:${++seq}`;
}
