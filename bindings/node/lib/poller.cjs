'use strict';
// Tells the main thread when a client's descriptor is readable, without reading it.
//
// libdlock reads its connection itself, in dlock_client_dispatch(), and its descriptor is not
// always the socket: while the agent restarts it is a timerfd that fires when it is time to
// reconnect, then the new connection's socket (docs/restarts.md). Node.js cannot watch a
// descriptor for readability without reading it (a net.Socket reads what comes), nor watch a
// timerfd at all, so one worker thread per process waits in poll(2) on the descriptors of every
// open client (poll-thread.cjs), and the main thread dispatches the clients whose descriptor it
// reports readable. A round: the main thread sends the descriptors, the thread polls, answers
// with the readable ones and waits for the next message; the main thread dispatches those
// clients, each reads its descriptor again, and the main thread sends the set as it is then.
// When the set changes meanwhile (a client opened or closed, a descriptor changed after a
// call), the main thread writes to an eventfd the thread polls too, which ends its round.
//
// The thread keeps the event loop alive only while some client asks for it (a lease held, an
// acquire pending: keepAlive()); it is stopped when the last client stops watching, and woken
// at the process's exit so that it never holds the exit up.

const path = require('node:path');
const { Worker } = require('node:worker_threads');

const EFD_NONBLOCK = 0o4000;
const EFD_CLOEXEC = 0o2000000;
// Should the thread fail (koffi not loading in it, say), every client is dispatched on a
// timer instead: later than on readiness, but nothing waits for ever.
const FALLBACK_MS = 20;

let n = null; // native.cjs's bindings
const one = Buffer.from([1, 0, 0, 0, 0, 0, 0, 0]);
// The running thread: { worker, wake (its eventfd), polling (it has a set and polls it),
// woken (its eventfd was written in this round), sent (fd -> client: the set of the round) }
let thread = null;
const watched = new Map(); // client -> { fd, onReady }
const alive = new Set(); // clients that keep the event loop alive
let exitHooked = false;
let fallback = null; // the Error that made the thread fail
let tick = null; // the fallback's timer

function start() {
  const wake = n.eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake < 0) {
    fail(new Error('dlock: cannot make an eventfd for the poller thread'));
    return;
  }
  let worker;
  try {
    worker = new Worker(path.join(__dirname, 'poll-thread.cjs'), { workerData: { wake } });
  } catch (err) {
    n.closeFd(wake);
    fail(err);
    return;
  }
  const t = { worker, wake, polling: false, woken: false, sent: new Map() };
  thread = t;
  worker.on('message', (ready) => onRound(t, ready));
  worker.on('error', (err) => {
    if (thread === t) fail(err);
  });
  // Its eventfd is closed once it is gone: no other thread polls it, nor a number reused.
  worker.on('exit', () => n.closeFd(wake));
  ref();
  if (!exitHooked) {
    exitHooked = true;
    process.on('exit', () => {
      if (thread) n.write(thread.wake, one, 8);
    });
  }
  send(t);
}

function stop() {
  const t = thread;
  thread = null;
  if (!t) return;
  n.write(t.wake, one, 8); // ends its poll(), and the terminate takes effect
  t.worker.terminate();
}

function fail(err) {
  stop();
  fallback = err;
  changed();
}

// Sends the set of this round: every watched client's descriptor.
function send(t) {
  t.sent = new Map();
  for (const [client, w] of watched) t.sent.set(w.fd, client);
  t.polling = true;
  t.woken = false;
  t.worker.postMessage([...t.sent.keys()]);
}

// The thread's answer: the descriptors found readable. The clients' dispatches may open,
// close or move descriptors: the next round takes the set as it is after them.
function onRound(t, ready) {
  if (thread !== t) return;
  t.polling = false;
  for (const fd of ready) {
    const client = t.sent.get(fd);
    const w = client && watched.get(client);
    if (w) w.onReady();
  }
  if (thread === t && !t.polling && watched.size) send(t);
}

// The set changed: the thread polls it anew (started when it was not running, stopped when
// nothing is left to watch).
function changed() {
  if (fallback) {
    if (watched.size && !tick) {
      tick = setInterval(() => {
        for (const w of [...watched.values()]) w.onReady();
      }, FALLBACK_MS);
      ref();
    } else if (!watched.size && tick) {
      clearInterval(tick);
      tick = null;
    }
    return;
  }
  if (!watched.size) {
    stop();
  } else if (!thread) {
    start();
  } else if (thread.polling && !thread.woken) {
    thread.woken = true;
    n.write(thread.wake, one, 8);
  }
  // else: the thread's answer is being handled, and the next round sends the set as it is
}

/**
 * Watches fd for client, instead of what it watched before: onReady() is called on the main
 * thread when fd is readable. Called again with the same number when that number is another
 * file now (the thread must poll it anew).
 */
function watch(native, client, fd, onReady) {
  n = native;
  watched.set(client, { fd, onReady });
  changed();
}

function unwatch(client) {
  alive.delete(client);
  if (!watched.delete(client)) return;
  ref();
  changed();
}

/** Whether client keeps the event loop alive (while it holds a lease or waits for one). */
function keepAlive(client, want) {
  if (want) alive.add(client);
  else alive.delete(client);
  ref();
}

function ref() {
  const h = thread ? thread.worker : tick;
  if (!h) return;
  if (alive.size) h.ref();
  else h.unref();
}

module.exports = { watch, unwatch, keepAlive };
