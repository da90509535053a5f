'use strict';
// The poller's thread (see poller.cjs): waits in poll(2) on the descriptors the main thread
// sends, and answers with those that are readable. One round at a time: a message with the
// descriptors to watch, a poll() until one of them or the wake eventfd is readable, a message
// with the readable ones (which drains the eventfd); then nothing until the next message, so
// that a descriptor still readable is not reported again before the main thread has handled it.

const { parentPort, workerData } = require('node:worker_threads');
const koffi = require('koffi');

const libc = koffi.load('libc.so.6');
// struct pollfd { int fd; short events; short revents; }, 8 bytes each, in a Buffer
const poll = libc.func('int poll(_Inout_ uint8_t *fds, unsigned long nfds, int timeout)');
const read = libc.func('long read(int fd, _Out_ uint8_t *buf, unsigned long count)');

const POLLIN = 1;
const EINTR = 4;
// poll() returns now and then, when nothing came: a moment at which the thread can be stopped
// (its JavaScript runs again), should the main thread's wake never come
const TIMEOUT_MS = 1000;
const { wake } = workerData;
const counter = Buffer.alloc(8);

parentPort.on('message', (fds) => {
  const n = fds.length + 1;
  const set = Buffer.alloc(8 * n);
  [wake, ...fds].forEach((fd, i) => {
    set.writeInt32LE(fd, 8 * i);
    set.writeInt16LE(POLLIN, 8 * i + 4);
  });
  for (;;) {
    const r = poll(set, n, TIMEOUT_MS);
    if (r === 0 || (r < 0 && koffi.errno() === EINTR)) continue;
    const ready = [];
    // r < 0 (no memory): report them all, and the main thread dispatches each once
    for (let i = 1; i < n; i++) if (r < 0 || set.readInt16LE(8 * i + 6) !== 0) ready.push(fds[i - 1]);
    if (r > 0 && set.readInt16LE(6) !== 0) read(wake, counter, 8);
    parentPort.postMessage(ready);
    return;
  }
});
