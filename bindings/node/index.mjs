import dlock from './lib/dlock.cjs';

export const {
  Client,
  Lease,
  LeaseSet,
  acquire,
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
} = dlock;
