#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Checks the layering of agent/ (docs/architecture.md).

1. Every #include "x.h" of a file in agent/ names a header of its own layer
   or of a layer below it (base < core < backend, front < shell).
2. No include cycle between the modules (file stems) of agent/.
3. With a core library given, its undefined symbols name no event loop,
   Redis client, socket or clock: the core is pure.

Usage: check-layers.py AGENT_DIR [LIBDLOCKD_CORE.a]
       check-layers.py --self-test   (the checks find what they must, on a
                                      small tree made for the purpose)"""
import os
import re
import subprocess
import sys

LAYERS = {"base": 0, "core": 1, "backend": 2, "front": 2, "shell": 3}
# Headers from outside agent/ that any layer may use (libclient's codec,
# the public header), and those only the shell may use (the redis-server
# launcher of dev mode, tools/redisproc.h).
OUTSIDE = {"wire.h", "shm.h", "dlock.h"}
SHELL_ONLY = {"redisproc.h"}
FORBIDDEN = re.compile(
    r"^(ev_\w+|redis\w+|socket|connect|bind|listen|accept4?|recv|recvfrom|recvmsg|recvmmsg|"
    r"send|sendto|sendmsg|sendmmsg|"
    r"clock_gettime|gettimeofday|time|getrandom|timerfd_\w+|epoll_\w+|poll|select|"
    r"sd_\w+|fork|exec\w*|"
    # base's own clock and randomness: the core gets time and random bits passed in
    r"now_ns|realtime_us|random_u64|random_unit|random_bytes)$"
)

def check(root, lib=None):
    errors = []
    where = {}  # header basename -> layer
    files = []
    for layer in LAYERS:
        d = os.path.join(root, layer)
        for f in sorted(os.listdir(d)):
            if f.endswith((".c", ".h")):
                files.append((layer, os.path.join(d, f)))
                if f.endswith(".h"):
                    where[f] = layer
    edges = {}
    for layer, path in files:
        stem = os.path.splitext(os.path.basename(path))[0]
        edges.setdefault(stem, set())
        text = open(path, errors="replace").read()
        for inc in re.findall(r'^\s*#\s*include\s+"([^"]+)"', text, re.M):
            base = os.path.basename(inc)
            if base in OUTSIDE:
                continue
            if base in SHELL_ONLY:
                if layer != "shell":
                    errors.append(f"{path}: {layer} includes {inc}, which only the shell may use")
                continue
            if base not in where:
                errors.append(f"{path}: includes {inc}, which is in no layer")
                continue
            to = where[base]
            if LAYERS[to] > LAYERS[layer] or (LAYERS[to] == LAYERS[layer] and to != layer):
                errors.append(f"{path}: {layer} includes {inc} of {to}: includes point down")
            t = os.path.splitext(base)[0]
            if t != stem:
                edges[stem].add(t)
    # Cycles: Tarjan's strongly connected components.
    index, low, stack, on, n = {}, {}, [], set(), [0]
    def strong(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                errors.append("include cycle: " + " <-> ".join(sorted(comp)))
    sys.setrecursionlimit(10000)
    for v in list(edges):
        if v not in index:
            strong(v)
    if lib:
        out = subprocess.run(["nm", "-u", lib], capture_output=True, text=True, check=True)
        for line in out.stdout.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0] == "U" and FORBIDDEN.match(parts[1]):
                errors.append(f"the core library uses {parts[1]}: the core does no I/O and reads no clock")
    return errors, len(files), sum(len(v) for v in edges.values())


def self_test():
    """A tree with one include pointing up and one cycle inside a layer, and
    a clean one: the first must give exactly those two errors."""
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        for layer in LAYERS:
            os.mkdir(os.path.join(d, layer))
        def put(path, text):
            with open(os.path.join(d, path), "w") as f:
                f.write(text)
        put("base/a.h", "")
        put("core/b.h", '#include "a.h"\n')
        put("front/c.h", '#include "b.h"\n')
        put("shell/e.c", '#include "c.h"\n')
        clean, _, _ = check(d)
        put("core/f.c", '#include "b.h"\n#include "c.h"\n')  # core includes front
        put("front/d.h", '#include "c.h"\n')
        put("front/c.c", '#include "d.h"\n')                 # c <-> d
        dirty, _, _ = check(d)
    up = [e for e in dirty if "includes point down" in e and "core/f.c" in e]
    cyc = [e for e in dirty if e == "include cycle: c <-> d"]
    symbols = all(FORBIDDEN.match(n) for n in ("ev_run", "redisAsyncCommand", "socket",
                                               "clock_gettime", "now_ns", "random_bytes"))
    symbols = symbols and not any(FORBIDDEN.match(n) for n in ("table_init", "theap_set",
                                                                "eventually", "sendable"))
    ok = not clean and len(dirty) == 2 and len(up) == 1 and len(cyc) == 1 and symbols
    print("self-test:", "ok" if ok else
          f"FAIL (clean tree: {clean}, broken tree: {dirty}, symbol patterns: {symbols})")
    return 0 if ok else 1


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    errors, nfiles, nedges = check(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None)
    for e in errors:
        print(e)
    print(f"{nfiles} files in {len(LAYERS)} layers, {nedges} include edges: "
          f"{'FAIL' if errors else 'ok'}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
