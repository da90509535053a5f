// Type-checked with `tsc -p test/types` (not run): the API as a TypeScript user sees it.
import {
  Client, Lease, LeaseSet, acquire, DlockError, BusyError, LostError, TimeoutError, ERRNO,
  type AcquireOptions, type LeaseEvent, type LeaseState,
} from 'dlock';

async function example(): Promise<bigint> {
  const client: Client = await Client.open({ socket: '/run/dlock/dlock.sock' });
  client.on('event', (ev: LeaseEvent) => {
    const s: 'held' | 'jeopardy' | 'lost' = ev.state;
    void s;
  });
  client.on('disconnect', (err) => console.error(err.code));
  const opts: AcquireOptions = {
    ttl: 30000, wait: 5000, kind: 'semaphore', permits: 3, reentrant: false, owner: 1n,
    maxHold: 60000, progress: 10000, signal: AbortSignal.timeout(1000),
  };
  try {
    await using lease = await client.acquire('orders:42', opts);
    lease.on('lost', (err: LostError) => console.error(err.reason));
    lease.on('jeopardy', (err: DlockError) => console.error(err.code, err.errno));
    lease.check();
    lease.touch();
    const state: LeaseState = lease.state;
    const ok: boolean = lease.valid;
    const left: number = lease.remaining + lease.ttl + lease.holds;
    void state; void ok; void left;
    return lease.fence;
  } catch (err) {
    if (err instanceof BusyError || err instanceof TimeoutError) return -1n;
    if (err instanceof DlockError && err.code === 'EUNAVAIL' && err.errno === ERRNO.EUNAVAIL) return -2n;
    throw err;
  } finally {
    await client.close();
  }
}

async function both(client: Client): Promise<boolean> {
  await using set: LeaseSet = await client.acquireSet(['accounts:1', 'accounts:2'], { wait: 5000 });
  set.on('lost', (err: LostError, lease: Lease) => console.error(lease.name, err.reason));
  const fences: bigint[] = set.leases.map((l) => l.fence);
  const names: string[] = set.names;
  void fences; void names;
  set.check();
  return set.valid;
}

async function oneShot(): Promise<void> {
  const lease: Lease = await acquire('reports', { wait: Infinity });
  await lease.release();
}

void example;
void oneShot;
void both;
