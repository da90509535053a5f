'use strict';
// DLOCK_E* codes (include/dlock.h) and the error classes built from them.

const CODES = {
  [-1]: 'EINVAL',
  [-2]: 'ENOMEM',
  [-3]: 'ECONNECT',
  [-4]: 'EDISCONNECTED',
  [-5]: 'EPROTO',
  [-6]: 'EVERSION',
  [-7]: 'EBUSY',
  [-8]: 'ETIMEDOUT',
  [-9]: 'ENAMETOOLONG',
  [-10]: 'EBADNAME',
  [-11]: 'ELIMIT',
  [-12]: 'ENOTFOUND',
  [-13]: 'ELOST',
  [-14]: 'EUNAVAIL',
  [-15]: 'EBACKEND',
  [-16]: 'EOOM',
  [-17]: 'EREADONLY',
  [-18]: 'ELOADING',
  [-19]: 'EAUTH',
  [-20]: 'ESHUTDOWN',
  [-21]: 'EHOLDLIMIT',
  [-22]: 'ESTALLED',
  [-23]: 'ECLOCK',
  [-24]: 'ENOQUORUM',
  [-25]: 'EDENIED',
  [-26]: 'ENOANSWER',
  [-27]: 'EHELD',
  [-28]: 'EFAILOVER',
  [-29]: 'EKIND',
  [-30]: 'ECANCELED',
  [-31]: 'ERESTART',
};
const ERRNO = Object.fromEntries(Object.entries(CODES).map(([n, c]) => [c, Number(n)]));

/** Any failure reported by libdlock or the agent. */
class DlockError extends Error {
  constructor(message, errno, options) {
    super(message, options);
    this.name = this.constructor.name;
    this.errno = errno;
    this.code = CODES[errno] || `E${-errno}`;
  }
}

/** The lock is held elsewhere and the acquire was a try-once (wait: 0). */
class BusyError extends DlockError {}
/** The wait ran out before the lock was free. */
class TimeoutError extends DlockError {}
/** The lease was lost before it was released: stop using it. `reason` tells why. */
class LostError extends DlockError {
  constructor(message, reason, options) {
    super(message, ERRNO.ELOST, options);
    this.reason = CODES[reason] || 'ELOST';
  }
}
/** The agent's policy does not let this user use the name. */
class DeniedError extends DlockError {}
/** Redis (in quorum mode: a majority of its nodes) is unreachable from the agent. */
class UnavailableError extends DlockError {}
/** The name is empty, too long for the agent, or holds forbidden bytes. */
class InvalidNameError extends DlockError {}
/** A re-entrant acquire by the owner of a lease on the name, as another kind (or other permits). */
class HeldError extends DlockError {}
/** The name is held, or waited for, as another kind of lock (or other permits). */
class KindError extends DlockError {}
/** The agent cannot be reached, went away, or the client was closed. */
class ConnectionError extends DlockError {}
/** A lease, waiter or renewal limit of the agent was hit. */
class LimitError extends DlockError {}

const CLASSES = {
  EBUSY: BusyError,
  ETIMEDOUT: TimeoutError,
  EDENIED: DeniedError,
  EUNAVAIL: UnavailableError,
  ENOQUORUM: UnavailableError,
  ENAMETOOLONG: InvalidNameError,
  EBADNAME: InvalidNameError,
  EHELD: HeldError,
  EKIND: KindError,
  ECONNECT: ConnectionError,
  EDISCONNECTED: ConnectionError,
  ENOANSWER: ConnectionError,
  ESHUTDOWN: ConnectionError,
  ELIMIT: LimitError,
};

/** The error for a DLOCK_E* code, in the given words. */
function errorFor(errno, message, extra) {
  const Cls = CLASSES[CODES[errno]] || DlockError;
  const err = errno === ERRNO.ELOST ? new LostError(message, errno) : new Cls(message, errno);
  if (extra) Object.assign(err, extra);
  return err;
}

module.exports = {
  CODES,
  ERRNO,
  DlockError,
  BusyError,
  TimeoutError,
  LostError,
  DeniedError,
  UnavailableError,
  InvalidNameError,
  HeldError,
  KindError,
  ConnectionError,
  LimitError,
  errorFor,
};
