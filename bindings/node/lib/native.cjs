'use strict';
// The C side: libdlock, and libc's eventfd(), write() and close() for the poller (poller.cjs),
// bound with koffi.
// Loaded on first use, so that importing the package never fails on its own.

const koffi = require('koffi');

let native = null;

function load() {
  if (native) return native;
  const path = process.env.DLOCK_LIBRARY || 'libdlock.so.0';
  let lib;
  try {
    lib = koffi.load(path);
  } catch (err) {
    const e = new Error(`cannot load libdlock from ${path}: ${err.message}`, { cause: err });
    e.code = 'ERR_DLOCK_LIBRARY';
    throw e;
  }
  const libc = koffi.load('libc.so.6');

  const Options = koffi.struct('dlock_acquire_options', {
    ttl_ms: 'uint32_t',
    wait_ms: 'int64_t',
    flags: 'uint32_t',
    max_hold_ms: 'uint32_t',
    progress_ms: 'uint32_t',
  });
  const Spec = koffi.struct('dlock_lock_spec', {
    kind: 'uint32_t',
    permits: 'uint32_t',
    owner: 'uint64_t',
  });
  // `void *arg` of the callbacks is declared intptr_t: the binding passes a small integer id.
  const AcquireCb = koffi.proto(
    'void dlock_acquire_cb(void *client, int status, void *lease, intptr_t arg)');
  const EventCb = koffi.proto(
    'void dlock_event_cb(void *client, void *lease, int state, int reason, intptr_t arg)');

  const f = (sig) => lib.func(sig);

  native = {
    koffi,
    AcquireCb,
    EventCb,
    Options,
    Spec,
    open: f('int dlock_client_open(_Out_ void **out, const char *socket_path)'),
    close: f('void dlock_client_close(void *client)'),
    fd: f('int dlock_client_fd(void *client)'),
    dispatch: f('int dlock_client_dispatch(void *client)'),
    setEventCb: f('void dlock_client_set_event_cb(void *client, dlock_event_cb *cb, intptr_t arg)'),
    acquireAsync: f('int dlock_lease_acquire_spec_async(void *client, const char *name, ' +
      'const dlock_acquire_options *opts, const dlock_lock_spec *spec, dlock_acquire_cb *cb, ' +
      'intptr_t arg)'),
    cancel: f('int dlock_lease_acquire_cancel(void *client, dlock_acquire_cb *cb, intptr_t arg)'),
    release: f('int dlock_lease_release(void *lease)'),
    name: f('const char *dlock_lease_name(void *lease)'),
    kind: f('int dlock_lease_kind(void *lease)'),
    holds: f('uint32_t dlock_lease_holds(void *lease)'),
    state: f('int dlock_lease_state(void *lease)'),
    deadlineNs: f('int64_t dlock_lease_deadline_ns(void *lease)'),
    valid: f('int dlock_lease_valid(void *lease)'),
    remainingNs: f('int64_t dlock_lease_remaining_ns(void *lease)'),
    touch: f('void dlock_lease_touch(void *lease)'),
    fence: f('uint64_t dlock_lease_fence(void *lease)'),
    ttlMs: f('uint32_t dlock_lease_ttl_ms(void *lease)'),
    strerror: f('const char *dlock_strerror(int err)'),
    clientStrerror: f('const char *dlock_client_strerror(void *client, int err)'),
    // the eventfd that wakes the poller's thread (poller.cjs)
    eventfd: libc.func('int eventfd(unsigned int initval, int flags)'),
    write: libc.func('long write(int fd, const void *buf, unsigned long count)'),
    closeFd: libc.func('int close(int fd)'),
  };
  return native;
}

module.exports = { load };
