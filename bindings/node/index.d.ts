// Types of the dlock client for Node.js (hand-written; see lib/dlock.cjs).
import { EventEmitter } from 'node:events';

/** The kinds of lock: one holder, readers together (or one writer), or `permits` holders. */
export type LockKind = 'exclusive' | 'shared' | 'semaphore';

/** The states of a lease. `held` and `jeopardy` are valid; `lost` and `released` are final. */
export type LeaseState = 'held' | 'jeopardy' | 'lost' | 'released';

/** The codes of DlockError (DLOCK_E* of libdlock without the prefix). */
export type ErrorCode =
  | 'EINVAL' | 'ENOMEM' | 'ECONNECT' | 'EDISCONNECTED' | 'EPROTO' | 'EVERSION' | 'EBUSY'
  | 'ETIMEDOUT' | 'ENAMETOOLONG' | 'EBADNAME' | 'ELIMIT' | 'ENOTFOUND' | 'ELOST' | 'EUNAVAIL'
  | 'EBACKEND' | 'EOOM' | 'EREADONLY' | 'ELOADING' | 'EAUTH' | 'ESHUTDOWN' | 'EHOLDLIMIT'
  | 'ESTALLED' | 'ECLOCK' | 'ENOQUORUM' | 'EDENIED' | 'ENOANSWER' | 'EHELD' | 'EFAILOVER'
  | 'EKIND' | 'ECANCELED' | 'ERESTART';

export interface OpenOptions {
  /** The agent's socket; default $DLOCK_SOCKET, else /run/dlock/dlock.sock. */
  socket?: string;
}

export interface AcquireOptions {
  /** Lease TTL on Redis in ms; 0 or absent: the agent's default (30 s). */
  ttl?: number;
  /**
   * How long to wait for the lock in ms: 0 (the default) tries once, Infinity waits until granted.
   * A finite wait the agent leaves unanswered for 10 s more rejects with ENOANSWER.
   */
  wait?: number;
  /** The kind of lock; default 'exclusive'. */
  kind?: LockKind;
  /** For kind 'semaphore' (required there): the most holders at once, the same for everyone. */
  permits?: number;
  /**
   * The owner may take a name it holds again: the same lease, one more hold. Without it, an
   * acquire has an owner of its own and waits for every other holder, on this client too (an
   * acquire of a name the same code holds waits for itself until its wait runs out).
   */
  reentrant?: boolean;
  /**
   * With `reentrant`: who owns the lease within the client (e.g. a task id), below 2^63 (the
   * binding's own owners are above); default 0, the client itself. Other owners wait.
   */
  owner?: number | bigint;
  /** Renewal stops this long (ms) after the acquire was sent to Redis; 0: the agent's default. */
  maxHold?: number;
  /** Renewal stops when touch() was not called for this long (ms); 0: the agent's default. */
  progress?: number;
  /** Aborting it cancels the acquire in the agent; the promise rejects with `signal.reason`. */
  signal?: AbortSignal;
}

/** What `client.on('event')` gets for each lease event. */
export interface LeaseEvent {
  lease: Lease;
  state: 'held' | 'jeopardy' | 'lost';
  /**
   * null for 'held'; the cause for 'jeopardy' (code 'ERESTART' while the agent restarts: the
   * lease stays valid, and is 'held' again once the next agent confirms it); the LostError for
   * 'lost'.
   */
  reason: DlockError | null;
}

/** A lease on a lock name, as granted by the agent. */
export declare class Lease extends EventEmitter {
  private constructor();
  /** The lock name. */
  readonly name: string;
  /** The fencing token: greater than that of every earlier grant of the name. */
  readonly fence: bigint;
  /** The TTL the agent granted, in ms. */
  readonly ttl: number;
  /** The kind of lock held. */
  readonly kind: LockKind;
  /** The client the lease was taken through. */
  readonly client: Client;
  /** Is the lease provably held right now? Reads shared memory: no round trip. */
  readonly valid: boolean;
  /** Milliseconds of validity left (0 when not valid). */
  readonly remaining: number;
  /** The validity deadline in ns on CLOCK_BOOTTIME; 0n once lost or released. */
  readonly deadline: bigint;
  readonly state: LeaseState;
  /** Re-entrant holds of the lease (1 unless re-entered; 0 once released). */
  readonly holds: number;
  /** Whether release() was called (or the client closed). */
  readonly released: boolean;
  /** Throws unless valid: the LostError after a loss, a DlockError ENOTFOUND after release. */
  check(): void;
  /** Tells the agent the holder makes progress (leases acquired with `progress`). */
  touch(): void;
  /** Gives the lease (one hold) up without a round trip; rejects with LostError if it was lost. */
  release(): Promise<void>;
  [Symbol.asyncDispose](): Promise<void>;

  on(event: 'held', listener: (reason: null) => void): this;
  on(event: 'jeopardy', listener: (reason: DlockError) => void): this;
  on(event: 'lost', listener: (reason: LostError) => void): this;
  once(event: 'held', listener: (reason: null) => void): this;
  once(event: 'jeopardy', listener: (reason: DlockError) => void): this;
  once(event: 'lost', listener: (reason: LostError) => void): this;
  off(event: 'held' | 'jeopardy' | 'lost', listener: (reason: any) => void): this;
}

/** Several names held at once, all or nothing: from `client.acquireSet()`. */
export declare class LeaseSet extends EventEmitter {
  private constructor();
  /** The names, in the order given to acquireSet(). */
  readonly names: string[];
  /** The members' leases, in the same order; each is released only with the set. */
  readonly leases: Lease[];
  /** The client the set was taken through. */
  readonly client: Client;
  /** Is every member provably held right now? One lease page read per member. */
  readonly valid: boolean;
  /** Whether release() was called. */
  readonly released: boolean;
  /** Throws unless every member is valid: the first invalid member's error. */
  check(): void;
  /** touch() of every member. */
  touch(): void;
  /** Gives every member up without a round trip; rejects with the first member's error. */
  release(): Promise<void>;
  [Symbol.asyncDispose](): Promise<void>;

  on(event: 'held', listener: (reason: null, lease: Lease) => void): this;
  on(event: 'jeopardy', listener: (reason: DlockError, lease: Lease) => void): this;
  on(event: 'lost', listener: (reason: LostError, lease: Lease) => void): this;
  once(event: 'held', listener: (reason: null, lease: Lease) => void): this;
  once(event: 'jeopardy', listener: (reason: DlockError, lease: Lease) => void): this;
  once(event: 'lost', listener: (reason: LostError, lease: Lease) => void): this;
  off(event: 'held' | 'jeopardy' | 'lost', listener: (...args: any[]) => void): this;
}

/** One connection to the host's dlockd. */
export declare class Client extends EventEmitter {
  private constructor();
  /** Connects; the handshake runs on the libuv thread pool. */
  static open(options?: OpenOptions): Promise<Client>;
  /** The agent's socket path. */
  readonly socket: string;
  /** Whether close() was called. */
  readonly closed: boolean;
  /** Acquires a lock name. */
  acquire(name: string, options?: AcquireOptions): Promise<Lease>;
  /**
   * Acquires every name (1 to 64, no two equal) or none: one at a time in byte-wise ascending
   * order, `wait` being one wait for the whole set; on a failure the names taken are released.
   */
  acquireSet(names: readonly string[], options?: AcquireOptions): Promise<LeaseSet>;
  /** Closes the connection: the agent releases every lease of the client. */
  close(): Promise<void>;
  [Symbol.asyncDispose](): Promise<void>;

  on(event: 'event', listener: (event: LeaseEvent) => void): this;
  /**
   * 'disconnect': the connection is gone for good (an agent without a state directory went
   * away, a protocol error): every lease lost, every pending acquire rejected. Not on an agent
   * restart, which the client rides out.
   */
  on(event: 'disconnect', listener: (error: ConnectionError) => void): this;
  once(event: 'event', listener: (event: LeaseEvent) => void): this;
  once(event: 'disconnect', listener: (error: ConnectionError) => void): this;
  off(event: 'event' | 'disconnect', listener: (arg: any) => void): this;
}

/** Acquires through a client of the process, opened on first use on $DLOCK_SOCKET. */
export declare function acquire(name: string, options?: AcquireOptions): Promise<Lease>;

/** Any failure reported by libdlock or the agent. */
export declare class DlockError extends Error {
  /** The code's name, e.g. 'EBUSY'. */
  readonly code: ErrorCode;
  /** The negative DLOCK_E* number, e.g. -7. */
  readonly errno: number;
  /** The lock name of the acquire that failed, when there was one. */
  readonly lock?: string;
  /** The socket of an open that failed. */
  readonly socket?: string;
}
/** EBUSY: the lock is held elsewhere and the acquire tried once. */
export declare class BusyError extends DlockError {}
/** ETIMEDOUT: the wait ran out. */
export declare class TimeoutError extends DlockError {}
/**
 * ELOST: the lease was lost; `reason` tells why (ELOST, EUNAVAIL, EDISCONNECTED, ESTALLED,
 * ERESTART when no agent took it over after a restart, ...).
 */
export declare class LostError extends DlockError {
  readonly code: 'ELOST';
  readonly reason: ErrorCode;
}
/** EDENIED: the agent's policy does not let this user use the name. */
export declare class DeniedError extends DlockError {}
/** EUNAVAIL, ENOQUORUM: Redis is unreachable from the agent. */
export declare class UnavailableError extends DlockError {}
/** ENAMETOOLONG, EBADNAME: the name is too long, empty, or holds forbidden bytes. */
export declare class InvalidNameError extends DlockError {}
/** EHELD: a re-entrant acquire by the owner of a lease on the name, as another kind (or permits). */
export declare class HeldError extends DlockError {}
/** EKIND: the name is held as another kind of lock (or other permits). */
export declare class KindError extends DlockError {}
/** ECONNECT, EDISCONNECTED, ENOANSWER, ESHUTDOWN: no agent, the connection ended, or no answer. */
export declare class ConnectionError extends DlockError {}
/** ELIMIT: a lease, waiter or renewal limit of the agent. */
export declare class LimitError extends DlockError {}

/** DLOCK_E* numbers by name, and names by number. */
export declare const ERRNO: Readonly<Record<ErrorCode, number>>;
export declare const CODES: Readonly<Record<number, ErrorCode>>;
