'use strict';
// The dlock client for Node.js: promises over libdlock's asynchronous calls.
//
// Every libdlock call is made on the main thread, the handshake of dlock_client_open() excepted
// (on the libuv pool, koffi .async()). None waits for an answer: acquires are
// dlock_lease_acquire_spec_async(), a release or a cancel never waits for the agent. Only an
// acquire sent to a full socket blocks, until there is room, up to 5 s (then the library counts
// the connection as broken), and a dispatch that reconnects after an agent restart waits for the
// new agent's handshake (at once from a live agent, up to 5 s from a wedged one). libdlock reads
// the connection itself, in dlock_client_dispatch(), inside which the C callbacks run; a worker
// thread tells the main thread when the client's descriptor is readable (poller.cjs), since the
// event loop cannot watch a descriptor without reading it. The descriptor may change after any
// call (a timerfd while the agent restarts, then the new connection's socket): the client reads
// it again after each call and has the poller watch the new one. The callbacks only record what
// happened; promises are settled and events emitted right after dlock_client_dispatch()
// returns, in the order the library reported them.

const { EventEmitter } = require('node:events');
const { fstatSync } = require('node:fs');
const { load } = require('./native.cjs');
const poller = require('./poller.cjs');
const errors = require('./errors.cjs');

const { ERRNO, DlockError, BusyError, TimeoutError, LostError, ConnectionError, InvalidNameError,
  errorFor } = errors;

const KINDS = { exclusive: 0, shared: 1, semaphore: 2 };
const KIND_NAMES = ['exclusive', 'shared', 'semaphore'];
const STATE_NAMES = { 1: 'held', 2: 'jeopardy', 3: 'lost', 4: 'released' };
const REENTRANT = 1;
const WAIT_FOREVER = -1;
const UINT32_MAX = 0xffffffff;
// Owners at or above 2^63 are the binding's: each plain acquire gets one of its own.
const OWN_OWNER = 1n << 63n;
const SET_MAX = 64; // DLOCK_SET_MAX
// An acquire the agent has not answered this long after its wait ran out is given up on
// (ENOANSWER), as libdlock's blocking acquire gives up (its ACQUIRE_SLACK_MS).
const ANSWER_SLACK_MS = 10000;
const TIMER_MAX_MS = 0x7fffffff; // the longest delay of a setTimeout()
const NEW = Symbol('dlock.internal');

let n = null; // the native bindings, once loaded
let acquireCbPtr = null;
let eventCbPtr = null;
let nextId = 1;
const pendingById = new Map(); // acquire id -> pending entry
const clientsByPtr = new Map(); // dlock_client * -> Client
const queue = []; // what the C callbacks reported, not yet handled
let drainScheduled = false;

function init() {
  if (n) return n;
  const native = load();
  acquireCbPtr = native.koffi.register(onAcquire, native.koffi.pointer(native.AcquireCb));
  eventCbPtr = native.koffi.register(onEvent, native.koffi.pointer(native.EventCb));
  n = native;
  return n;
}

// ---- C callbacks: they run inside dlock_client_dispatch(); record only ----

function onAcquire(clientPtr, status, leasePtr, id) {
  // The agent's words are to be read in the callback that got the error.
  const words = status ? n.clientStrerror(clientPtr, status) : null;
  queue.push({ acquire: true, id: Number(id), status, leasePtr, words });
  scheduleDrain();
}

function onEvent(clientPtr, leasePtr, state, reason) {
  queue.push({ acquire: false, clientPtr, leasePtr, state, reason });
  scheduleDrain();
}

function scheduleDrain() {
  if (drainScheduled) return;
  drainScheduled = true;
  queueMicrotask(drain);
}

function drain() {
  drainScheduled = false;
  while (queue.length) {
    const item = queue.shift();
    if (item.acquire) {
      const entry = pendingById.get(item.id);
      if (entry) {
        pendingById.delete(item.id);
        entry.client._complete(entry, item.status, item.leasePtr, item.words);
      } else if (item.status === 0) {
        n.release(item.leasePtr); // nobody asked for it (cannot happen); do not keep it
      }
    } else {
      const client = clientsByPtr.get(item.clientPtr);
      if (client) client._event(item.leasePtr, item.state, item.reason);
    }
  }
}

// ---- options ----

function msOption(opts, key, dflt) {
  const v = opts[key];
  if (v === undefined || v === null) return dflt;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 0 || v > UINT32_MAX) {
    throw new RangeError(`dlock: options.${key} must be an integer number of ms in [0, ${UINT32_MAX}], got ${String(v)}`);
  }
  return v;
}

function waitOption(v) {
  if (v === undefined || v === null) return 0;
  if (v === Infinity) return WAIT_FOREVER;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 0 || v > Number.MAX_SAFE_INTEGER) {
    throw new RangeError(`dlock: options.wait must be a non-negative integer of ms or Infinity, got ${String(v)}`);
  }
  return v;
}

// The owner of a re-entrant acquire: the caller's, below 2^63 (0, the default: the client).
function ownerOption(v) {
  if (v === undefined || v === null) return 0n;
  const b = typeof v === 'bigint' ? v : Number.isSafeInteger(v) ? BigInt(v) : -1n;
  if (b < 0n || b >= OWN_OWNER) {
    throw new RangeError(`dlock: options.owner must be an integer in [0, 2^63), got ${String(v)}`);
  }
  return b;
}

function parseAcquireOptions(opts) {
  if (opts === null || typeof opts !== 'object') throw new TypeError('dlock: options must be an object');
  const kindName = opts.kind === undefined ? 'exclusive' : opts.kind;
  if (!Object.prototype.hasOwnProperty.call(KINDS, kindName)) {
    throw new RangeError(`dlock: options.kind must be 'exclusive', 'shared' or 'semaphore', got ${String(kindName)}`);
  }
  const kind = KINDS[kindName];
  let permits = 0;
  if (kind === KINDS.semaphore) {
    permits = opts.permits;
    if (!Number.isInteger(permits) || permits < 1 || permits > UINT32_MAX) {
      throw new RangeError(`dlock: a semaphore needs options.permits, an integer >= 1, got ${String(permits)}`);
    }
  } else if (opts.permits !== undefined && opts.permits !== 0) {
    throw new RangeError(`dlock: options.permits is for kind 'semaphore' only`);
  }
  const reentrant = Boolean(opts.reentrant);
  const owner = ownerOption(opts.owner);
  if (!reentrant && owner !== 0n) {
    throw new RangeError('dlock: options.owner is for re-entrant acquires (reentrant: true)');
  }
  return {
    // Every acquire is sent re-entrant: a plain one with an owner of its own (Client#acquire),
    // so that two of them on one client wait for each other as two clients' would.
    options: {
      ttl_ms: msOption(opts, 'ttl', 0),
      wait_ms: waitOption(opts.wait),
      flags: REENTRANT,
      max_hold_ms: msOption(opts, 'maxHold', 0),
      progress_ms: msOption(opts, 'progress', 0),
    },
    spec: { kind, permits, owner },
    reentrant,
    signal: opts.signal,
  };
}

function checkName(name) {
  if (typeof name !== 'string') throw new TypeError('dlock: the lock name must be a string');
  if (name.includes('\0')) {
    throw new InvalidNameError('invalid lock name (it holds a NUL byte)', ERRNO.EBADNAME);
  }
}

// ---- leases ----

// One libdlock lease handle; several Lease objects share it when it was re-entered (each
// acquire that returned it is one hold and one Lease).
class Handle {
  constructor(ptr) {
    this.ptr = ptr;
    this.leases = new Set();
    this.lost = null; // the LostError once a LOST event came
  }
}

/** A lease on a lock name, as granted by the agent. Release it (or `await using` it). */
class Lease extends EventEmitter {
  #client;
  #handle;
  #done = false; // released, or freed by the client's close
  #finalState = 'released';
  #set = null; // the LeaseSet it is a member of

  constructor(token, client, handle) {
    if (token !== NEW) throw new TypeError('dlock: leases come from client.acquire()');
    super();
    this.#client = client;
    this.#handle = handle;
    const ptr = handle.ptr;
    /** The lock name. */
    this.name = n.name(ptr);
    /** The fencing token of the grant: greater than every earlier grant's for the name. */
    this.fence = BigInt(n.fence(ptr));
    /** The TTL the agent granted, in ms. */
    this.ttl = n.ttlMs(ptr);
    /** 'exclusive', 'shared' or 'semaphore'. */
    this.kind = KIND_NAMES[n.kind(ptr)] || 'exclusive';
  }

  /** The client the lease was taken through. */
  get client() {
    return this.#client;
  }

  /** Is the lease provably held right now? Reads the shared lease page: no round trip. */
  get valid() {
    return !this.#done && n.valid(this.#handle.ptr) === 1;
  }

  /** Milliseconds of validity left (0 when not valid). */
  get remaining() {
    return this.#done ? 0 : Number(n.remainingNs(this.#handle.ptr)) / 1e6;
  }

  /** The validity deadline in ns on CLOCK_BOOTTIME (0n once lost or released). */
  get deadline() {
    return this.#done ? 0n : BigInt(n.deadlineNs(this.#handle.ptr));
  }

  /** 'held', 'jeopardy', 'lost' or 'released'. */
  get state() {
    if (this.#done) return this.#finalState;
    return STATE_NAMES[n.state(this.#handle.ptr)] || 'lost';
  }

  /** The re-entrant holds of the lease (1 unless re-entered; 0 once released). */
  get holds() {
    return this.#done ? 0 : n.holds(this.#handle.ptr);
  }

  get released() {
    return this.#done;
  }

  /** Throws unless the lease is valid right now: the LostError after a loss. */
  check() {
    if (this.#done && this.#finalState === 'released') {
      throw new DlockError(`lease ${this.name} was released`, ERRNO.ENOTFOUND);
    }
    if (this.#handle.lost) throw this.#handle.lost;
    if (!this.valid) {
      throw new LostError(`lease ${this.name} is no longer valid (its deadline passed)`, ERRNO.ELOST);
    }
  }

  /** Tells the agent the holder makes progress (for leases acquired with `progress`). */
  touch() {
    if (!this.#done) n.touch(this.#handle.ptr);
  }

  /**
   * Gives the lease (one hold of it) up, without waiting for the agent. Resolves when it was
   * valid up to the release; rejects with a LostError when it had been lost, a ConnectionError
   * when the agent is gone. A second release does nothing.
   */
  release() {
    if (this.#set && !this.#done) {
      return Promise.reject(new DlockError(
        `lease ${this.name} is a member of a lease set: release the set`, ERRNO.EINVAL));
    }
    return this._release();
  }

  // release() without the check for a set's member (the set releases its members with it)
  _release() {
    if (this.#done) return Promise.resolve();
    const h = this.#handle;
    const lostBefore = h.lost;
    this.#done = true;
    h.leases.delete(this);
    const rc = n.release(h.ptr);
    this.#client._follow();
    if (h.leases.size === 0) this.#client._forget(h);
    if (rc === 0) return Promise.resolve();
    this.#finalState = 'lost';
    if (rc === ERRNO.ELOST) {
      return Promise.reject(lostBefore || new LostError(`lease ${this.name} was lost before its release`, ERRNO.ELOST));
    }
    return Promise.reject(errorFor(rc, n.strerror(rc), { lock: this.name }));
  }

  [Symbol.asyncDispose]() {
    return this.release();
  }

  _joinSet(set) {
    this.#set = set;
  }

  // the client was closed: the handle is gone
  _closed() {
    if (this.#done) return;
    this.#done = true;
    this.#finalState = this.#handle.lost ? 'lost' : 'released';
  }

  _event(state, reason, err) {
    if (this.#done) return;
    const name = STATE_NAMES[state];
    if (state === 3) this.#finalState = 'lost';
    this.emit(name, err);
    this.#client.emit('event', { lease: this, state: name, reason: err });
  }
}

// ---- lease sets ----

/** Several names held at once, all or nothing: `client.acquireSet()`. */
class LeaseSet extends EventEmitter {
  #leases;
  #done = false;

  constructor(token, client, leases) {
    if (token !== NEW) throw new TypeError('dlock: lease sets come from client.acquireSet()');
    super();
    this.#leases = leases;
    /** The client the set was taken through. */
    this.client = client;
    /** The names, in the caller's order. */
    this.names = leases.map((l) => l.name);
    for (const lease of leases) {
      lease._joinSet(this);
      for (const state of ['held', 'jeopardy', 'lost']) {
        lease.on(state, (reason) => this.emit(state, reason, lease));
      }
    }
  }

  /** The members' leases, in the caller's order (released only with the set). */
  get leases() {
    return [...this.#leases];
  }

  /** Is every member provably held right now? One lease page read per member. */
  get valid() {
    if (this.#done) return false;
    for (const lease of this.#leases) if (!lease.valid) return false;
    return true;
  }

  get released() {
    return this.#done;
  }

  /** Throws unless every member is valid: the first member's error, in the caller's order. */
  check() {
    for (const lease of this.#leases) lease.check();
  }

  /** Tells the agent the holder makes progress, for every member. */
  touch() {
    for (const lease of this.#leases) lease.touch();
  }

  /**
   * Gives every member up, without waiting for the agent. Resolves when every member was valid
   * up to the release; rejects with the first member's error, in the caller's order (a
   * LostError: that member was lost before). A second release does nothing.
   */
  release() {
    if (this.#done) return Promise.resolve();
    this.#done = true;
    return settleAll(this.#leases.map((l) => l._release()));
  }

  [Symbol.asyncDispose]() {
    return this.release();
  }
}

// Resolves once every promise settled: with nothing, or rejects with the first rejection.
async function settleAll(promises) {
  const results = await Promise.allSettled(promises);
  const failed = results.find((r) => r.status === 'rejected');
  if (failed) throw failed.reason;
}

// Byte-wise ascending order of the names' UTF-8 (libdlock's strcmp() order for sets).
function setOrder(names) {
  if (!Array.isArray(names)) throw new TypeError('dlock: the names of a set must be an array');
  if (names.length < 1 || names.length > SET_MAX) {
    throw new RangeError(`dlock: a set holds 1 to ${SET_MAX} names, got ${names.length}`);
  }
  const order = names.map((name, i) => {
    checkName(name);
    if (name === '') throw new InvalidNameError('invalid lock name (empty)', ERRNO.EBADNAME);
    return { name, i, bytes: Buffer.from(name) };
  });
  order.sort((a, b) => Buffer.compare(a.bytes, b.bytes));
  for (let k = 1; k < order.length; k++) {
    if (order[k].name === order[k - 1].name) {
      throw new RangeError(`dlock: the name ${order[k].name} is given twice in the set`);
    }
  }
  return order;
}

// ---- clients ----

/** One connection to the local dlockd. Open it with `await Client.open()`. */
class Client extends EventEmitter {
  #ptr;
  #socket;
  #fdId = null; // the descriptor the poller watches, and the file it is: "fd:dev:ino"
  #refd = false; // the client keeps the event loop alive
  #ownerSeq = 0n; // the owners of plain acquires: OWN_OWNER | ++#ownerSeq
  #handles = new Map(); // lease ptr -> Handle
  #live = 0; // handles not lost
  #pending = new Set(); // entries of this client's pending acquires
  #abandoned = new Set(); // entries settled already (ENOANSWER), whose callback is still due
  #closed = false;
  #broken = false;
  #closing = null;
  #closeWhenIdle = false; // close once the last lease handle is forgotten

  constructor(token, ptr, socket) {
    if (token !== NEW) throw new TypeError('dlock: use `await Client.open()`');
    super();
    this.#ptr = ptr;
    this.#socket = socket;
    clientsByPtr.set(ptr, this);
    n.setEventCb(ptr, eventCbPtr, 0);
    this.#follow();
    this.#sync();
  }

  /**
   * Connects to the agent at `socket`, else $DLOCK_SOCKET, else /run/dlock/dlock.sock. The
   * handshake runs on the libuv thread pool.
   */
  static open({ socket } = {}) {
    let native;
    try {
      native = init();
    } catch (err) {
      return Promise.reject(err);
    }
    const path = socket === undefined || socket === null ? null : String(socket);
    const where = path || process.env.DLOCK_SOCKET || '/run/dlock/dlock.sock';
    return new Promise((resolve, reject) => {
      const out = [null];
      native.open.async(out, path, (err, rc) => {
        if (err) return reject(err);
        if (rc !== 0) {
          return reject(errorFor(rc, `${native.strerror(rc)} (${where})`, { socket: where }));
        }
        try {
          resolve(new Client(NEW, out[0], where));
        } catch (e) {
          clientsByPtr.delete(out[0]);
          native.close(out[0]);
          reject(e);
        }
      });
    });
  }

  /** The agent's socket path. */
  get socket() {
    return this.#socket;
  }

  get closed() {
    return this.#closed || this.#closing !== null;
  }

  get _broken() {
    return this.#broken;
  }

  /**
   * Acquires `name`. Options (times in ms): ttl (0: the agent's default), wait (0: try once, the
   * default; Infinity: until granted), kind, permits, reentrant, owner, maxHold, progress, signal.
   */
  acquire(name, opts = {}) {
    let parsed;
    try {
      checkName(name);
      parsed = parseAcquireOptions(opts);
    } catch (err) {
      return Promise.reject(err);
    }
    return this.#acquire(name, parsed);
  }

  #acquire(name, parsed) {
    if (this.closed) {
      return Promise.reject(new ConnectionError('the client is closed', ERRNO.EDISCONNECTED));
    }
    const { signal } = parsed;
    if (signal && signal.aborted) return Promise.reject(signal.reason);
    // A plain acquire is re-entrant for an owner nobody else has: it waits for every other
    // holder of the name on this client, as another client's acquire would.
    if (!parsed.reentrant) parsed.spec.owner = OWN_OWNER | ++this.#ownerSeq;
    const id = nextId++;
    const entry = {
      id, client: this, name, signal, aborted: false, abandoned: false, onAbort: null, guard: null,
      resolve: null, reject: null,
    };
    const promise = new Promise((resolve, reject) => {
      entry.resolve = resolve;
      entry.reject = reject;
    });
    const rc = n.acquireAsync(this.#ptr, name, parsed.options, parsed.spec, acquireCbPtr, id);
    if (rc !== 0) {
      // (EDISCONNECTED from a try-once while the agent restarts: the client goes on)
      entry.reject(errorFor(rc, n.clientStrerror(this.#ptr, rc), { lock: name }));
      this.#follow();
      return promise;
    }
    pendingById.set(id, entry);
    this.#pending.add(entry);
    if (signal) {
      entry.onAbort = () => this.#abort(entry);
      signal.addEventListener('abort', entry.onAbort, { once: true });
    }
    const wait = parsed.options.wait_ms;
    if (wait !== WAIT_FOREVER) this.#guard(entry, performance.now() + wait + ANSWER_SLACK_MS);
    this.#sync();
    // A send that found the socket full waited for room and read what the agent sent
    // meanwhile into the library's buffer, where the poller does not see it: handle it now.
    this.#dispatch();
    return promise;
  }

  /**
   * Acquires every name of `names` or none: one at a time in byte-wise ascending order of their
   * UTF-8 (whatever the order given), each with `opts`, `wait` being one wait for the whole set.
   * When a name cannot be taken, or one taken is lost meanwhile, the names taken are released
   * and the promise rejects with that error (a TimeoutError when the set's wait ran out).
   */
  async acquireSet(names, opts = {}) {
    const order = setOrder(names);
    const parsed = parseAcquireOptions(opts);
    const { signal } = parsed;
    if (signal && signal.aborted) throw signal.reason;
    const wait = parsed.options.wait_ms;
    const deadline = wait > 0 ? performance.now() + wait : 0;
    // aborted by the caller's signal, or by the loss of a member taken
    const inner = new AbortController();
    const onAbort = () => inner.abort(signal.reason);
    if (signal) signal.addEventListener('abort', onAbort, { once: true });
    const onLost = (err) => inner.abort(err);
    const taken = [];
    try {
      for (const e of order) {
        // what is left of the one wait: a try-once or an endless wait stays so; a name reached
        // once the wait ran out gets one try
        parsed.options.wait_ms = wait > 0 ? Math.max(0, Math.ceil(deadline - performance.now())) : wait;
        let lease;
        try {
          lease = await this.#acquire(e.name, { ...parsed, spec: { ...parsed.spec }, signal: inner.signal });
        } catch (err) {
          if (err instanceof BusyError && wait !== 0) {
            // the set's wait ran out before this name's turn
            const t = new TimeoutError(`the wait for the set ran out at ${e.name}`, ERRNO.ETIMEDOUT,
              { cause: err });
            t.lock = e.name;
            throw t;
          }
          throw err;
        }
        taken.push(lease);
        lease.once('lost', onLost); // cuts the wait for a later name short
        // lost already: a LOST read with the grant was emitted before the listener was there
        lease.check();
        if (inner.signal.aborted) throw inner.signal.reason;
      }
      // a member lost (or past its deadline) while a later one was waited for: not whole
      for (const lease of taken) lease.check();
      for (const lease of taken) lease.off('lost', onLost);
      const leases = new Array(order.length);
      order.forEach((e, k) => (leases[e.i] = taken[k]));
      return new LeaseSet(NEW, this, leases);
    } catch (err) {
      for (const lease of taken) {
        lease.off('lost', onLost);
        lease._release().catch(() => {});
      }
      throw err;
    } finally {
      if (signal) signal.removeEventListener('abort', onAbort);
    }
  }

  // Gives the acquire up if the agent has not answered by `at` (performance.now()): the timer
  // is unref'd, the pending acquire itself keeps the process alive.
  #guard(entry, at) {
    const left = at - performance.now();
    entry.guard = left > TIMER_MAX_MS
      ? setTimeout(() => this.#guard(entry, at), TIMER_MAX_MS)
      : setTimeout(() => this.#noAnswer(entry), Math.max(0, left));
    entry.guard.unref();
  }

  // The agent did not answer in time (stopped, wedged): the acquire is cancelled and rejected
  // with ENOANSWER at once. Its callback still comes if the agent wakes up: a lease that was
  // granted meanwhile is then released (_complete()).
  #noAnswer(entry) {
    entry.guard = null;
    if (!this.#pending.has(entry)) return;
    this.#dispatch(); // what the library read already
    if (!this.#pending.has(entry) || !this.#ptr) return;
    if (!entry.aborted) n.cancel(this.#ptr, acquireCbPtr, entry.id);
    entry.abandoned = true;
    this.#pending.delete(entry);
    this.#abandoned.add(entry);
    if (entry.onAbort) entry.signal.removeEventListener('abort', entry.onAbort);
    entry.reject(errorFor(ERRNO.ENOANSWER, n.strerror(ERRNO.ENOANSWER), { lock: entry.name }));
    this.#sync();
  }

  #abort(entry) {
    if (entry.aborted || entry.abandoned || !pendingById.has(entry.id)) return;
    entry.aborted = true;
    // 0: the callback comes later (DLOCK_ECANCELED, or a grant that crossed the cancel, which
    // _complete() releases); anything else: it is already on its way. Either way the promise is
    // settled by _complete(), once the agent has no waiter left for it.
    const rc = n.cancel(this.#ptr, acquireCbPtr, entry.id);
    this.#follow();
    if (rc !== 0 && rc !== ERRNO.ENOTFOUND) {
      // nothing was sent (no memory): the waiter stays until its wait runs out, and a grant
      // that comes meanwhile is released at once
      entry.reject(entry.signal.reason);
    }
  }

  // an acquire completed (from drain())
  _complete(entry, status, leasePtr, words) {
    this.#pending.delete(entry);
    this.#abandoned.delete(entry);
    clearTimeout(entry.guard);
    if (entry.onAbort) entry.signal.removeEventListener('abort', entry.onAbort);
    if (entry.aborted || entry.abandoned) {
      if (status === 0) {
        const h = this.#handles.get(leasePtr);
        n.release(leasePtr); // one hold: a re-entered handle keeps its others
        this.#follow();
        if (h && h.leases.size === 0) this.#forget(h);
      }
      if (!entry.abandoned) entry.reject(entry.signal.reason); // else: settled already
      this.#sync();
      return;
    }
    if (status !== 0) {
      entry.reject(errorFor(status, words || n.strerror(status), { lock: entry.name }));
      this.#sync();
      return;
    }
    let h = this.#handles.get(leasePtr);
    if (!h) {
      h = new Handle(leasePtr);
      this.#handles.set(leasePtr, h);
      this.#live++;
    }
    const lease = new Lease(NEW, this, h);
    h.leases.add(lease);
    entry.resolve(lease);
    this.#sync();
  }

  // a lease event (from drain())
  _event(leasePtr, state, reason) {
    const h = this.#handles.get(leasePtr);
    if (!h) return;
    let err;
    if (state === 3) {
      const why = reason || ERRNO.ELOST;
      const name = h.leases.size ? [...h.leases][0].name : '';
      const cause = why === ERRNO.ELOST ? undefined : errorFor(why, n.strerror(why));
      err = new LostError(`lease ${name} lost: ${n.strerror(why)}`, why, cause ? { cause } : undefined);
      if (!h.lost) this.#live--;
      h.lost = err;
      this.#sync();
    } else if (state === 2) {
      err = errorFor(reason, n.strerror(reason));
    } else {
      err = null;
    }
    for (const lease of [...h.leases]) lease._event(state, reason, err);
  }

  // the last hold of a handle was released
  _forget(h) {
    this.#forget(h);
  }

  #forget(h) {
    if (this.#handles.delete(h.ptr) && !h.lost) this.#live--;
    this.#sync();
    if (this.#closeWhenIdle && this.#handles.size === 0) this.close();
  }

  // The process-wide client of acquire() was dropped (its agent went away): it is closed as
  // soon as no lease handle of it is left, the ones in the program's hands being released.
  _closeWhenIdle() {
    this.#closeWhenIdle = true;
    if (this.#handles.size === 0) this.close();
  }

  // The client keeps the event loop alive while acquires are pending or leases held (not lost):
  // a process with nothing held exits by itself.
  #sync() {
    if (!this.#ptr || this.#broken) return;
    const want = this.#pending.size > 0 || this.#live > 0;
    if (want === this.#refd) return;
    this.#refd = want;
    poller.keepAlive(this, want);
  }

  // libdlock's descriptor may change after any call on the client (docs/restarts.md): while
  // the agent restarts it is a timerfd that fires when it is time to reconnect, then the new
  // connection's socket, maybe under the old number (libdlock closes the socket, then makes the
  // timer). So the descriptor is read again after each call and told apart by its file; the
  // poller watches the one it is now.
  #follow() {
    if (!this.#ptr || this.#broken) return;
    const fd = n.fd(this.#ptr);
    let id = String(fd);
    try {
      const st = fstatSync(fd, { bigint: true });
      id = `${fd}:${st.dev}:${st.ino}`;
    } catch {
      // not open (cannot be): the poller reports it at once, and the dispatch looks again
    }
    if (id === this.#fdId) return;
    this.#fdId = id;
    poller.watch(n, this, fd, () => this.#dispatch());
  }

  // after a call a lease made on the client's connection (a release)
  _follow() {
    this.#follow();
  }

  // Has the library handle what the agent sent (and, while the agent restarts, reconnect when
  // it is time): acquires complete and events are delivered, through drain().
  #dispatch() {
    if (!this.#ptr || this.#broken) return;
    const rc = n.dispatch(this.#ptr);
    drain();
    if (!this.#ptr) return; // closed by a listener
    if (rc === ERRNO.EDISCONNECTED) {
      this.#broke(rc);
      return;
    }
    this.#sync();
    this.#follow();
  }

  // The connection is gone for good (an agent that keeps no state went away, a protocol
  // error): every lease was told LOST and every pending acquire rejected.
  #broke(rc) {
    if (this.#broken) return;
    this.#broken = true;
    this.#refd = false;
    poller.unwatch(this);
    this.emit('disconnect', new ConnectionError(n.strerror(rc), rc));
  }

  /**
   * Closes the connection: the agent releases every lease of the client. Pending acquires are
   * rejected with a ConnectionError; leases turn invalid.
   */
  close() {
    if (this.#closing) return this.#closing;
    drain();
    this.#closed = true;
    this.#refd = false;
    poller.unwatch(this);
    clientsByPtr.delete(this.#ptr);
    for (const entry of this.#pending) {
      pendingById.delete(entry.id);
      clearTimeout(entry.guard);
      if (entry.onAbort) entry.signal.removeEventListener('abort', entry.onAbort);
      entry.reject(entry.aborted ? entry.signal.reason
        : errorFor(ERRNO.EDISCONNECTED, 'the client was closed', { lock: entry.name }));
    }
    this.#pending.clear();
    for (const entry of this.#abandoned) pendingById.delete(entry.id);
    this.#abandoned.clear();
    for (const h of this.#handles.values()) for (const lease of h.leases) lease._closed();
    this.#handles.clear();
    this.#live = 0;
    n.close(this.#ptr);
    this.#ptr = null;
    this.#closing = Promise.resolve();
    return this.#closing;
  }

  [Symbol.asyncDispose]() {
    return this.close();
  }
}

// ---- a process-wide client for the top-level acquire() ----

let defaultClient = null; // a promise of it

// Another client is opened at the next acquire(); this one is closed once nothing of it is used.
function dropDefault(opening, client) {
  if (defaultClient === opening) defaultClient = null;
  client?._closeWhenIdle();
}

/** Acquires through a client of the process, opened on first use on $DLOCK_SOCKET. */
async function acquire(name, opts) {
  const current = defaultClient;
  if (current) {
    const c = await current.catch(() => null);
    // closed, or the agent went away: open another
    if (!c || c.closed || c._broken) dropDefault(current, c);
  }
  if (!defaultClient) {
    const opening = Client.open();
    defaultClient = opening;
    opening.then((c) => c.once('disconnect', () => dropDefault(opening, c)),
      () => dropDefault(opening, null));
  }
  const client = await defaultClient;
  return client.acquire(name, opts);
}

module.exports = {
  Client,
  Lease,
  LeaseSet,
  acquire,
  ...errors,
};
delete module.exports.errorFor;
