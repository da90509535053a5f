'use strict';
// One poll(2) for every client of the process, run on the libuv thread pool with koffi's
// .async(), so that the event loop never blocks: it waits on the fds of the clients that have
// acquires pending or leases held, plus an eventfd that wakes it when that set changes or the
// process exits. When it returns, the main thread calls dlock_client_dispatch() on each client
// whose fd is readable (the callbacks run there), then polls again while any client needs it.
// The pool thread touches only the fds, never a dlock_client.

const POLLIN = 0x001;
const EFD_NONBLOCK = 0o4000;
const EFD_CLOEXEC = 0o2000000;

class Poller {
  constructor(n) {
    this.n = n;
    this.wanted = new Set(); // clients that need their events now
    this.inflight = null; // { members: Set, done: Promise } of the poll under way
    this.wakePending = false;
    this.idleCheck = false;
    this.failures = 0;
    this.wakefd = n.eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (this.wakefd < 0) throw new Error('dlock: eventfd() failed');
    this.one = Buffer.alloc(8);
    this.one.writeBigUInt64LE(1n);
    this.sink = Buffer.alloc(8);
    // A pool thread blocked in poll() would keep the process from exiting: wake it.
    process.on('exit', () => this.wake());
  }

  wake() {
    if (this.wakePending) return;
    this.wakePending = true;
    this.n.write(this.wakefd, this.one, 8);
  }

  /** The client has acquires pending or leases held: watch its fd. */
  add(client) {
    this.wanted.add(client);
    if (!this.inflight) this.start();
    else if (!this.inflight.members.has(client)) this.wake();
  }

  /** The client needs no events for now. The poll under way is stopped only when no client is
   * left after the current turn (an acquire right behind a release, the usual loop, keeps it). */
  remove(client) {
    if (!this.wanted.delete(client) || this.wanted.size || !this.inflight || this.idleCheck) return;
    this.idleCheck = true;
    setImmediate(() => {
      this.idleCheck = false;
      if (this.wanted.size === 0 && this.inflight) this.wake();
    });
  }

  /** Resolves once no poll under way watches the client's fd (before it is closed). */
  async detach(client) {
    this.wanted.delete(client);
    while (this.inflight && this.inflight.members.has(client)) {
      this.wake();
      await this.inflight.done;
    }
  }

  start() {
    const members = [...this.wanted];
    const buf = Buffer.alloc(8 * (members.length + 1));
    buf.writeInt32LE(this.wakefd, 0);
    buf.writeInt16LE(POLLIN, 4);
    members.forEach((c, i) => {
      buf.writeInt32LE(c._fd, 8 * (i + 1));
      buf.writeInt16LE(POLLIN, 8 * (i + 1) + 4);
    });
    let resolve;
    const done = new Promise((r) => (resolve = r));
    this.inflight = { members: new Set(members), done };
    this.n.poll.async(buf, members.length + 1, -1, (err, rc) => {
      this.inflight = null;
      if (buf.readInt16LE(6)) {
        this.n.read(this.wakefd, this.sink, 8);
        this.wakePending = false;
      }
      if (err || rc < 0) this.failures++;
      else this.failures = 0;
      members.forEach((c, i) => {
        if (buf.readInt16LE(8 * (i + 1) + 6)) c._dispatch();
      });
      resolve();
      if (!this.wanted.size || this.inflight) return;
      if (this.failures > 1) setTimeout(() => this.wanted.size && !this.inflight && this.start(), 10);
      else this.start();
    });
  }
}

let poller = null;

function getPoller(n) {
  if (!poller) poller = new Poller(n);
  return poller;
}

module.exports = { getPoller };
