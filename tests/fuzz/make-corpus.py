#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Writes the seed corpora of the fuzz targets (corpus/<target>/).

The seeds are small inputs in each target's format (README.md) that reach
the code worth fuzzing from the start: a handshake and the requests after
it, a configuration file of each mode, replies of each kind Redis and
Sentinel give, lease journals. They are checked in; run this again after changing it (it
replaces the files it makes and leaves the others, such as crash
regressions, alone).

Usage: make-corpus.py [CORPUS_DIR]   (default: corpus/ beside this file)"""
import os
import struct
import sys

HELLO, ACQUIRE, RELEASE, PING, ACQUIRE_EX, CANCEL, RESUME = 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07
HELLO_OK, GRANTED, OK, ERROR, EVENT = 0x81, 0x82, 0x83, 0x84, 0x85
MAGIC, VERSION = 0x4B434C44, 1
CONTROL = 0xFFFF  # fuzz_agent: a frame for the harness, not the agent
FIRST_LEASE = 1 << 32  # the first lease id of a fresh agent (table.c)
REUSED_LEASE = 2 << 32  # the next lease of the first slot, once it was freed


def frame(ftype, body=b"", fid=0):
    return struct.pack("<IHHI", len(body), ftype, 0, fid) + body


def hello(fid=1, version=VERSION):
    return frame(HELLO, struct.pack("<IHH", MAGIC, version, 0), fid)


def acquire(name, fid=2, ttl=0, wait=0, flags=0, max_hold=0, progress=0):
    name = name.encode()
    body = struct.pack("<IqIIIH", ttl, wait, flags, max_hold, progress, len(name)) + name
    return frame(ACQUIRE, body, fid)


EXCLUSIVE, SHARED, SEMAPHORE = 0, 1, 2
REENTRANT = 0x1


def acquire_ex(names, fid=2, ttl=0, wait=0, flags=0, kind=EXCLUSIVE, permits=0, owner=0,
               max_hold=0, progress=0):
    names = [n.encode() for n in ([names] if isinstance(names, str) else names)]
    body = struct.pack("<IqIIIBBHIQ", ttl, wait, flags, max_hold, progress, kind, 0, len(names),
                       permits, owner)
    body += b"".join(struct.pack("<H", len(n)) + n for n in names)
    return frame(ACQUIRE_EX, body, fid)


def release(lease, fid=3):
    return frame(RELEASE, struct.pack("<Q", lease), fid)


def control(action, arg=0, body=b""):
    return frame(CONTROL, body, action | arg << 8)


def to_peer(n):
    return control(0, n)


def wait_ms(ms):
    return control(4, ms)


def agent_seeds():
    lease = FIRST_LEASE
    done = b"\x00"  # the store stub: every answer a success
    return {
        "hello-acquire-release": done + hello() + acquire("a") + release(lease) + frame(PING, fid=4),
        "try-once-busy": done + hello() + acquire("a") + to_peer(1) + hello() + acquire("a", wait=0),
        # peer 1 waits; peer 0's release hands the key over (cohort handoff)
        "handoff": done + hello() + acquire("a") + to_peer(1) + hello()
        + acquire("a", wait=-1) + to_peer(0) + release(lease) + to_peer(1) + release(REUSED_LEASE),
        # a short TTL, renewed while time passes; a bounded hold; a touch
        "renew": done + hello() + acquire("l/short", ttl=30, max_hold=40, progress=25)
        + wait_ms(20) + control(5, 0, struct.pack("<Q", 1)) + wait_ms(25),
        # taken, then an error of the store, then granted (two bits an answer)
        "store-taken-error": bytes([0b00_00_10_01]) + hello() + acquire("a", wait=2000)
        + acquire("x/1") + wait_ms(30) + acquire("l"),
        "store-not-ours": bytes([0b01_01_01_00]) + hello() + acquire("a", ttl=30) + wait_ms(25)
        + release(lease),
        "failover": done + hello() + acquire("a") + acquire("l") + control(2) + control(1)
        + control(6) + wait_ms(5),
        "limits": done + hello() + b"".join(acquire("x/%d" % i, fid=10 + i) for i in range(10)),
        "bad-requests": done + hello() + acquire("") + acquire("b") + acquire("a" * 300)
        + acquire("a", flags=1) + acquire("a", wait=-2) + release(12345)
        + frame(0x42, b"?") + frame(PING, b"x"),
        # the kinds: re-entered twice and released in turn, readers side by
        # side, a semaphore of 2 with a third waiting, a writer behind readers
        "reentrant": done + hello() + acquire_ex("a", flags=REENTRANT)
        + acquire_ex("a", fid=3, flags=REENTRANT, wait=-1)
        + acquire_ex("a", fid=4, flags=REENTRANT, owner=7)
        + release(lease, fid=5) + release(lease, fid=6) + acquire("a", fid=7),
        "shared": done + hello() + acquire_ex("r", kind=SHARED) + to_peer(1) + hello()
        + acquire_ex("r", kind=SHARED) + acquire("r", fid=3, wait=-1) + to_peer(0)
        + acquire_ex("r", fid=4, kind=SHARED, wait=0) + release(lease, fid=5),
        "semaphore": done + hello() + acquire_ex("s", kind=SEMAPHORE, permits=2)
        + acquire_ex("s", fid=3, kind=SEMAPHORE, permits=2) + to_peer(1) + hello()
        + acquire_ex("s", kind=SEMAPHORE, permits=2, wait=-1)
        + acquire_ex("s", fid=3, kind=SEMAPHORE, permits=3) + acquire_ex("s", fid=4, kind=SHARED)
        + to_peer(0) + release(lease),
        "bad-kinds": done + hello() + acquire_ex("a", kind=3) + acquire_ex("a", kind=SEMAPHORE)
        + acquire_ex("a", kind=SHARED, permits=2) + acquire_ex("a", flags=2)
        + acquire_ex(["a", "b"]) + acquire_ex("") + acquire_ex("a", owner=5)
        + frame(ACQUIRE_EX, b"\x00" * 40),
        "no-hello": done + acquire("a", fid=1),
        "bad-version": done + hello(version=9),
        "bad-header": done + hello() + struct.pack("<IHHI", 5000, ACQUIRE, 0, 1),
        "closed-abruptly": done + hello() + acquire("a") + to_peer(1) + hello()
        + acquire("a", wait=-1) + control(3) + to_peer(0) + release(lease),
        "third-peer-refused": done + hello() + to_peer(1) + hello() + to_peer(2) + hello(),
        "partial-frame": done + hello() + acquire("a")[:20],
        # a client that reads no reply: the agent queues them, then stops
        # reading it (its uid's output cap), but still takes its release
        "deaf-release": done + hello() + acquire("a") + control(7)
        + b"".join(frame(PING, fid=100 + i) for i in range(60)) + release(lease)
        + to_peer(1) + hello() + acquire("a", wait=-1) + to_peer(0) + control(7),
        # SIGHUP: a policy that no longer lets the waiter wait, then the first
        "policy-reload": done + hello() + acquire("a") + to_peer(1) + hello()
        + acquire("a", wait=-1) + control(8, 0) + acquire("x/1") + control(8, 1),
        # cancels: of a waiter (answered), of it again, of a granted acquire,
        # of an unknown id, and a malformed one
        "cancel": done + hello() + acquire("a") + to_peer(1) + hello()
        + acquire("a", fid=5, wait=-1) + frame(CANCEL, fid=5) + frame(CANCEL, fid=5)
        + frame(CANCEL, fid=2) + frame(CANCEL, fid=99) + acquire("a", fid=6, wait=-1)
        + to_peer(0) + release(lease) + to_peer(1) + frame(CANCEL, fid=6) + frame(CANCEL, b"x", 7),
        # SIGTERM with a lease, a waiter and a release in flight
        "shutdown": done + hello() + acquire("a") + to_peer(1) + hello()
        + acquire("a", wait=-1) + to_peer(0) + release(lease) + control(9),
    }


def wire_seeds():
    granted = struct.pack("<QQQII", FIRST_LEASE, 123456789, 1000, 30000, 0)
    msg = b"lock name is empty"
    return {
        "hello": hello(),
        "hello-ok": frame(HELLO_OK, struct.pack("<HHIIIQ", 1, 0, 200, 100000, 30000, 42), 1),
        "hello-ok-2": frame(HELLO_OK, struct.pack("<HHIIIQQ", 2, 1, 200, 100000, 30000, 42,
                                                  0x1234) + bytes(range(16)), 1),
        "resume": frame(RESUME, struct.pack("<IHHQ", MAGIC, 2, 0, 0x1234) + bytes(range(16)), 1),
        "acquire": acquire("build/main", ttl=30000, wait=-1),
        "acquire-ex": acquire_ex("build/main", ttl=30000, wait=-1, kind=SHARED),
        "acquire-ex-names": acquire_ex(["a", "orders/42", "b"], flags=REENTRANT,
                                       kind=SEMAPHORE, permits=3, owner=0x1234),
        "release": release(FIRST_LEASE),
        "ping-ok": frame(PING, fid=7) + frame(OK, fid=7),
        "granted": frame(GRANTED, granted, 2),
        "error": frame(ERROR, struct.pack("<iH", -10, len(msg)) + msg, 2),
        "event": frame(EVENT, struct.pack("<QHHiQ", FIRST_LEASE, 3, 0, -13, 99)),
        "stream": hello() + acquire("a") + release(FIRST_LEASE) + frame(PING, fid=4),
        "stream-ex": hello() + acquire_ex("a", flags=REENTRANT) + acquire_ex("a", fid=3,
                                                                             flags=REENTRANT)
        + release(FIRST_LEASE, fid=4) + release(FIRST_LEASE, fid=5),
        "socket-path": b"/run/dlock/dlock.sock",
        "socket-path-x": b"/tmp/x.sock",
    }


def config_seeds(root):
    with open(os.path.join(root, "packaging", "dlockd.conf"), "rb") as f:
        packaged = f.read()
    flags = b"\0".join([b"/tmp/a.sock", b"", b"127.0.0.1:7000", b"auto", b"p:", b"5000"]) + b"\0"
    return {
        "packaged": packaged,
        "quorum": b"[redis]\naddress = 10.0.0.1:6379, 10.0.0.2:6379\n"
        b"address = 10.0.0.3:6379\nnode_timeout_ms = 20\n[agent]\nmin_ttl_ms = 100\n",
        "cluster": b"[redis]\nmode = cluster\naddress = [::1]:7000 unix:/run/redis.sock\n"
        b"topology_refresh_ms = 500\n",
        "sentinel": b"[redis]\nmode = sentinel\nsentinel_master = mymaster\n"
        b"address = 10.0.0.1:26379\nwait_replicas = 1\nwait_timeout_ms = 100\n",
        "policy": b"[policy]\nallow = * build/*\nallow = @adm deploy/* 0 *\nsee_all = root @adm\n"
        b"max_leases_per_uid = 10\nmax_output_per_uid = 65536\n",
        "agent": b"[agent]\nsocket = /tmp/d.sock\nstatus_socket =\nprefix = {dl}:\n"
        b"renew_fraction = 0.5\nlog_level = debug\nsocket_mode = 0600\n"
        b"metrics_listen = 127.0.0.1:9464\nfence_retention_ms = 100\n",
        "errors": b"[agent]\nmin_ttl_ms = 50\nmax_ttl_ms = 40\n[nowhere]\nkey = 1\n",
        "flags": b"[agent]\nsocket = /tmp/f.sock\n\0" + flags,
    }


def bulk(s):
    s = s.encode() if isinstance(s, str) else s
    return b"$%d\r\n%s\r\n" % (len(s), s)


def array(*items):
    return b"*%d\r\n" % len(items) + b"".join(items)


def node(host, port, nid="07c37dfeb235213a872192d90877d0cd55635b91"):
    return array(bulk(host), b":%d\r\n" % port, bulk(nid))


def replies_seeds():
    token = "0123456789abcdef0123456789abcdef"
    record = token + " host 1234 1000 worker"
    info = ("# Server\r\nredis_version:7.0.15\r\nrun_id:8f6e8a3c1d0b4e2f9a7c6b5d4e3f2a1b0c9d8e7f\r\n"
            "uptime_in_seconds:12\r\n")
    switch = "mymaster 10.0.0.1 6379 10.0.0.2 6380"
    return {
        "acquire-token": b":1700000000000001\r\n",
        "acquire-taken": b":-1500\r\n:0\r\n",
        "renew-done": b":1\r\n",
        "lookup": array(bulk(token), bulk(record), b":2500\r\n"),
        "lookup-foreign": array(bulk("someone else's value"), b"$-1\r\n", b":-1\r\n"),
        "noscript": b"-NOSCRIPT No matching script. Please use EVAL.\r\n",
        "moved": b"-MOVED 3999 127.0.0.1:6381\r\n-ASK 12 [::1]:7002\r\n-TRYAGAIN x\r\n",
        "errors": b"-READONLY You can't write against a read only replica.\r\n"
        b"-OOM command not allowed\r\n-CLUSTERDOWN The cluster is down\r\n",
        "info": bulk(info),
        "cluster-slots": array(
            array(b":0\r\n", b":5460\r\n", node("127.0.0.1", 7000), node("127.0.0.1", 7003)),
            array(b":5461\r\n", b":16383\r\n", node("", 7001), node("::1", 7004))),
        "sentinel-master": array(bulk("10.0.0.2"), bulk("6379")) + b"*-1\r\n",
        "sentinel-switch": array(bulk("message"), bulk("+switch-master"), bulk(switch)),
        "status-nil": b"+OK\r\n$-1\r\n+PONG\r\n",
    }


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


# The lease journal (agent/base/journal.h): records in the host's byte order.
J_CONN_PUT, J_CONN_END, J_LEASE_PUT, J_LEASE_END = 1, 2, 3, 4
TOKEN = b"0123456789abcdef0123456789abcdef"


def jrec(rtype, payload):
    rec = struct.pack("=IBBH", len(payload), rtype, 1, 0) + payload
    return rec + struct.pack("=I", crc32c(rec))


def jconn(cid, pid=4242, uid=1000, gid=1000, start=987654, nslots=64, flags=1):
    secret = bytes((cid * 7 + i) & 0xFF for i in range(16))
    return jrec(J_CONN_PUT, struct.pack("=QQIIIII16s", cid, start, pid, uid, gid, nslots, flags,
                                        secret))


def jlease(cid, lid, name, slot=0, kind=EXCLUSIVE, fmt=0, permits=0, ttl=30000, holds=1,
           holder=0, fence=17, until=0, progress=0, token=TOKEN):
    name = name.encode() if isinstance(name, str) else name
    return jrec(J_LEASE_PUT, struct.pack("=QQQQQQIIIIBBH32s", cid, lid, holder, fence, until,
                                         progress, slot, permits, ttl, holds, kind, fmt,
                                         len(name), token) + name)


def jend(cid, lid=None):
    if lid is None:
        return jrec(J_CONN_END, struct.pack("=Q", cid))
    return jrec(J_LEASE_END, struct.pack("=QQ", cid, lid))


def journal_seeds():
    """The first byte is the harness's: 1 makes it write the right CRCs."""
    lease = FIRST_LEASE
    kept = jconn(1) + jlease(1, lease, "build/main", fence=99, until=5 * 10**9)
    life = (kept + jlease(1, lease, "build/main", holds=2) + jconn(2, flags=0)
            + jlease(2, lease, "orders:42", slot=3, fmt=1) + jlease(1, lease + 1, "x")
            + jend(1, lease + 1) + jend(2) + jconn(1, nslots=128))
    flipped = bytearray(life)
    flipped[len(kept) + 40] ^= 0x10
    # fields the checks refuse, behind CRCs the harness makes right
    bad = bytearray(jlease(1, 5, "bad", kind=3) + jlease(1, 6, "bad", token=TOKEN.upper()))
    return {
        "empty": b"\x00",
        "conn-lease": b"\x00" + kept,
        "life": b"\x00" + life,
        "kinds": b"\x00" + jconn(7) + jlease(7, 1, "r", kind=SHARED, fmt=2)
        + jlease(7, 2, "s", kind=SEMAPHORE, permits=4, fmt=3, progress=10**9)
        + jlease(7, 3, "t", holder=0xFFFFFFFFFFFFFFFF, holds=5),
        "longest-name": b"\x00" + jconn(3) + jlease(3, 9, "n" * 1024),
        "torn-tail": b"\x00" + life[:-7],
        "flipped-bit": b"\x00" + bytes(flipped),
        "resealed-bad-fields": b"\x01" + kept + bytes(bad),
        "orphan-and-ends": b"\x00" + jlease(5, 1, "early") + jend(5) + jend(5, 1) + jconn(5)
        + jlease(5, 1, "late"),
    }


def write(corpus, target, seeds):
    d = os.path.join(corpus, target)
    os.makedirs(d, exist_ok=True)
    for name, data in seeds.items():
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    corpus = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "corpus")
    root = os.path.dirname(os.path.dirname(here))
    write(corpus, "agent", agent_seeds())
    write(corpus, "wire", wire_seeds())
    write(corpus, "config", config_seeds(root))
    write(corpus, "replies", replies_seeds())
    write(corpus, "journal", journal_seeds())


if __name__ == "__main__":
    main()
