#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# check-upgrade.sh BUILD_DIR SOURCE_DIR -- the package upgrade test, under a
# real systemd.
#
# Boots systemd as PID 1 of a throwaway container (new PID, mount, network,
# UTS, IPC and cgroup namespaces over an overlay of the running system, so
# nothing installed in it reaches the machine), and in it:
#
#  1. starts a Redis server, and installs this build's packages dlockd,
#     libdlock0 and python3-dlock with `apt-get install ./PKG.deb`: the
#     agent's sockets start, and the agent with the first client;
#  2. starts two holders of a lease: `dlockctl run` with a CMD that runs
#     until the test lets it end, and a Python program on libdlock that
#     checks its lease's valid() all along and records every event;
#  3. installs a newer build of dlockd (this one, its version bumped) with
#     `apt-get install ./dlockd_NEW.deb`: postinst restarts the agent, a
#     systemd restart job, so the agent leaves its leases to its successor;
#  4. checks that the agent is a new process of the new binary, that it lists
#     both leases with their fencing tokens unchanged, and then that the CMD
#     ran to its end (exit 0, not 79) with the same DLOCK_FENCE, and that the
#     Python holder's lease stayed valid throughout, saw no LOST (at most a
#     JEOPARDY for the restart, then HELD), and released without error;
#  5. then `systemctl stop dlockd`, a stop: a holder taken after it gets
#     LOST (DLOCK_ESHUTDOWN) at once, the documented difference.
#
# Exits 0 when everything holds; 77 (skipped) when the machine cannot boot
# systemd in a container (not root, no systemd, no overlayfs, no usable
# cgroup hierarchy) or the build is a sanitizer build; 1 with a message
# naming the first check that failed. Everything it made is removed in every
# case: the container's processes, its cgroups and the temporary directory.
set -Eeuo pipefail

if [ "${1:-}" = --boot ]; then
    # Internal: PID 1 of the new namespaces. $2: the container's directory.
    dir=$2
    mount --make-rprivate /
    mkdir -p "$dir/lower" "$dir/layer"
    mount -t tmpfs -o mode=755 tmpfs "$dir/layer"
    mkdir "$dir/layer/upper" "$dir/layer/work" "$dir/layer/root"
    mount --bind / "$dir/lower"
    root=$dir/layer/root
    mount -t overlay overlay \
        -o "lowerdir=$dir/lower,upperdir=$dir/layer/upper,workdir=$dir/layer/work" "$root"
    mount -t proc proc "$root/proc"
    mount -t sysfs sysfs "$root/sys"
    # The cgroup hierarchies, mounted afresh in the new cgroup namespace: the
    # container's systemd sees the test's own cgroup as the root.
    mount -t tmpfs -o mode=755 tmpfs "$root/sys/fs/cgroup"
    if [ "$3" = unified ]; then
        mount -t cgroup2 cgroup2 "$root/sys/fs/cgroup"
    else
        mkdir "$root/sys/fs/cgroup/systemd" "$root/sys/fs/cgroup/unified"
        mount -t cgroup -o none,name=systemd cgroup "$root/sys/fs/cgroup/systemd"
        mount -t cgroup2 cgroup2 "$root/sys/fs/cgroup/unified"
    fi
    mount --rbind /dev "$root/dev"
    mount -t tmpfs -o mode=755 tmpfs "$root/run"
    mount -t tmpfs -o mode=1777 tmpfs "$root/tmp"
    mkdir -p "$root/srv/dlock-upgrade" "$root/etc/systemd/system"
    cp "$dir"/debs/*.deb "$root/srv/dlock-upgrade/"
    # A machine where installing a package starts its services, as a real
    # one does: no policy-rc.d (container images have one that forbids it).
    rm -f "$root/usr/sbin/policy-rc.d"
    # A boot target with only what the test needs: the system bus.
    cat >"$root/etc/systemd/system/dlock-upgrade-test.target" <<'EOF'
[Unit]
Description=dlock package upgrade test
DefaultDependencies=no
Requires=dbus.socket
After=dbus.socket
EOF
    cd "$root"
    mkdir -p .oldroot
    pivot_root . .oldroot
    umount -l /.oldroot
    exec env -i container=dlock-upgrade-test /lib/systemd/systemd --unit=dlock-upgrade-test.target
fi

if [ $# -ne 2 ] || [ ! -f "$1/CPackConfig.cmake" ] || [ ! -f "$2/include/dlock.h" ]; then
    echo "usage: $0 BUILD_DIR SOURCE_DIR (a configured and built tree, and its sources)" >&2
    exit 2
fi
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
cpack=${CPACK:-cpack}
self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")

skip() {
    echo "check-upgrade: SKIP: $*"
    exit 77
}
[ "$(id -u)" = 0 ] || skip "booting systemd in a container needs root"
[ -x /lib/systemd/systemd ] || skip "systemd is not installed"
for c in unshare nsenter dpkg-deb apt-get fakeroot python3; do
    command -v "$c" >/dev/null || skip "$c is not installed"
done
grep -qw overlay /proc/filesystems || skip "the kernel has no overlayfs"
if [ "$(stat -f -c %T /sys/fs/cgroup)" = cgroup2fs ]; then
    cgmode=unified
    hierarchies=(/sys/fs/cgroup)
elif [ -d /sys/fs/cgroup/systemd ] && [ -d /sys/fs/cgroup/unified ]; then
    cgmode=hybrid
    hierarchies=(/sys/fs/cgroup/systemd /sys/fs/cgroup/unified)
else
    skip "no cgroup hierarchy for systemd (neither cgroup2 nor name=systemd beside it)"
fi
# The whole listing first: grep -q would quit at the match, and objdump's
# next write would then fail the pipeline (pipefail).
needed=$(objdump -p "$build/agent/dlockd" 2>/dev/null || true)
if [[ $needed =~ NEEDED\ +lib(a|ub|t)san ]]; then
    skip "a sanitizer build: its packages need the sanitizer's runtime preloaded"
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/dlock-upgrade.XXXXXX")
chmod 755 "$tmp"
cg=dlock-upgrade-test.$$
pid1=
boot_pid=
cleanup() {
    if [ -n "$pid1" ]; then
        kill -KILL "$pid1" 2>/dev/null || true
    fi
    if [ -n "$boot_pid" ]; then
        wait "$boot_pid" 2>/dev/null || true
    fi
    # Every process of the container died with its PID 1; its cgroups go.
    for h in "${hierarchies[@]}"; do
        [ -d "$h/$cg" ] || continue
        local n
        for n in 1 2 3 4 5 6 7 8 9 10; do
            find "$h/$cg" -depth -type d -exec rmdir {} + 2>/dev/null || true
            [ -d "$h/$cg" ] || break
            sleep 0.2 # the kernel frees a cgroup shortly after its last process
        done
    done
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

fail() {
    echo "check-upgrade: FAIL: $*" >&2
    if [ -n "$pid1" ]; then
        echo "--- the agent's journal:" >&2
        in_ct journalctl --no-pager -u dlockd -u dlockd.socket -n 60 >&2 2>&1 || true
    fi
    for f in "$tmp"/*.out; do
        [ -f "$f" ] && { echo "--- $(basename "$f"):" >&2; cat "$f" >&2; }
    done
    exit 1
}
trap 'fail "command failed (line $LINENO): $BASH_COMMAND"' ERR
step() { echo "check-upgrade: $*"; }
must_equal() { # what, expected, actual
    [ "$2" = "$3" ] || fail "$1: expected '$2', got '$3'"
}
# in_ct CMD [ARG...]: CMD in the container, with a clean environment.
in_ct() {
    nsenter -t "$pid1" -a env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 "$@"
}
# in_ct_bg CMD [ARG...]: in_ct for a background job, whose failing status is
# for the test to judge, not for the ERR trap.
in_ct_bg() {
    trap - ERR
    in_ct "$@"
}
# wait_for WHAT SECONDS CMD [ARG...]: until CMD succeeds, or fail at the deadline.
wait_for() {
    local what=$1 deadline=$((SECONDS + $2))
    shift 2
    until "$@" >/dev/null 2>&1; do
        ((SECONDS < deadline)) || fail "$what: not within the deadline"
        sleep 0.1
    done
}

hdr_version() { sed -n "s/^#define DLOCK_VERSION_$1 *\([0-9][0-9]*\).*/\1/p" "$src/include/dlock.h"; }
version=$(hdr_version MAJOR).$(hdr_version MINOR).$(hdr_version PATCH)
newer=$version+upgradetest1
arch=$(dpkg --print-architecture)

# ---------------------------------------------------------------------------
step "1. the packages, and a newer build of dlockd ($newer)"
mkdir "$tmp/debs"
"$cpack" -G DEB --config "$build/CPackConfig.cmake" -B "$tmp/cpack" >"$tmp/cpack.log" 2>&1 ||
    fail "cpack failed: $(cat "$tmp/cpack.log")"
for p in dlockd libdlock0 python3-dlock; do
    cp "$tmp/cpack/${p}_${version}_"*.deb "$tmp/debs/"
done
dpkg-deb -R "$tmp/debs/dlockd_${version}_$arch.deb" "$tmp/newer"
sed -i "s/^Version: .*/Version: $newer/" "$tmp/newer/DEBIAN/control"
dpkg-deb --root-owner-group -b "$tmp/newer" "$tmp/debs/dlockd_${newer}_$arch.deb" >/dev/null
rm -rf "$tmp/newer" "$tmp/cpack"

# ---------------------------------------------------------------------------
step "2. boot systemd in a container"
# The container's cgroups live under one of the test's own, in each hierarchy.
for h in "${hierarchies[@]}"; do mkdir "$h/$cg"; done
(
    for h in "${hierarchies[@]}"; do echo "$BASHPID" >"$h/$cg/cgroup.procs"; done
    exec unshare --pid --fork --mount --uts --ipc --net --cgroup "$self" --boot "$tmp" "$cgmode"
) >"$tmp/boot.out" 2>&1 &
boot_pid=$!
# unshare forks PID 1, which execs systemd at the end of --boot.
find_pid1() {
    local pid
    pid=$(pgrep -P "$boot_pid" | head -1)
    [ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = systemd ] && pid1=$pid
}
wait_for "systemd started in the container" 60 find_pid1
running() {
    local s
    s=$(in_ct systemctl is-system-running 2>/dev/null) || true
    [ "$s" = running ] || [ "$s" = degraded ]
}
wait_for "the container's systemd finished booting" 120 running
in_ct ip link set lo up
in_ct systemd-run --quiet --unit=redis-test redis-server --port 6379 --save "" --appendonly no
wait_for "Redis answers in the container" 60 in_ct redis-cli -p 6379 ping

# ---------------------------------------------------------------------------
step "3. apt-get install the packages of $version"
in_ct sh -c "cd /srv/dlock-upgrade && DEBIAN_FRONTEND=noninteractive apt-get install -y \
    ./dlockd_${version}_$arch.deb ./libdlock0_${version}_$arch.deb ./python3-dlock_${version}_all.deb" \
    >"$tmp/install.out" 2>&1 || fail "apt-get install of $version: $(tail -20 "$tmp/install.out")"
wait_for "dlockd.socket active after the installation" 60 in_ct systemctl is-active dlockd.socket

# ---------------------------------------------------------------------------
step "4. two holders: dlockctl run, and Python on libdlock"
# The CMD runs until /tmp/go appears, and prints its fencing token.
in_ct_bg dlockctl run -w 60s upgrade:shell -- sh -c \
    'echo "start $DLOCK_FENCE"; while [ ! -e /tmp/go ]; do sleep 0.1; done; echo "end $DLOCK_FENCE"' \
    >"$tmp/shell.out" 2>&1 &
shell_pid=$!
in_ct_bg python3 -c '
import os, sys, time, dlock
events = []
def on_event(lease, state, reason):
    events.append("%s:%d" % (state, int(reason)))
client = dlock.Client()
lease = client.acquire("upgrade:python", ttl=30, wait=60, on_event=on_event)
print("held", lease.fence, flush=True)
while not os.path.exists("/tmp/go"):
    if not lease.valid:
        print("invalid", lease.state, ",".join(events), flush=True)
        sys.exit(1)
    time.sleep(0.01)
deadline = time.monotonic() + 120
while str(lease.state) != "held" and time.monotonic() < deadline:
    time.sleep(0.05)
print("state", lease.state, "valid", lease.valid, "fence", lease.fence, flush=True)
print("events", ",".join(events) or "none", flush=True)
lease.release()
print("released", flush=True)
' >"$tmp/python.out" 2>&1 &
python_pid=$!
wait_for "the shell holder's CMD started" 60 grep -q '^start ' "$tmp/shell.out"
wait_for "the Python holder got its lease" 60 grep -q '^held ' "$tmp/python.out"
shell_fence=$(sed -n 's/^start //p' "$tmp/shell.out")
python_fence=$(sed -n 's/^held //p' "$tmp/python.out")
# The agent's leases, NAME=FENCE, sorted.
leases() {
    in_ct dlockctl leases --json | python3 -c '
import json, sys
print(" ".join(sorted("%s=%s" % (l["name"], l["fence"]) for l in json.load(sys.stdin)["leases"])))'
}
expected="upgrade:python=$python_fence upgrade:shell=$shell_fence"
must_equal "the leases before the upgrade" "$expected" "$(leases)"
old_pid=$(in_ct systemctl show -p MainPID --value dlockd.service)
[ "$old_pid" -gt 0 ] || fail "dlockd.service has no main process: $old_pid"

# ---------------------------------------------------------------------------
step "5. apt-get install ./dlockd_${newer}_$arch.deb, with both holders running"
in_ct sh -c "cd /srv/dlock-upgrade && DEBIAN_FRONTEND=noninteractive apt-get install -y \
    ./dlockd_${newer}_$arch.deb" >"$tmp/upgrade.out" 2>&1 ||
    fail "apt-get install of $newer: $(tail -20 "$tmp/upgrade.out")"
# shellcheck disable=SC2016 # dpkg-query's own ${...}
must_equal "dlockd's version after the upgrade" "$newer" \
    "$(in_ct dpkg-query -W -f '${Version}' dlockd)"
new_agent() {
    local pid
    pid=$(in_ct systemctl show -p MainPID --value dlockd.service)
    [ "$pid" -gt 0 ] && [ "$pid" != "$old_pid" ] &&
        [ "$(in_ct systemctl is-active dlockd.service)" = active ] &&
        [ "$(in_ct readlink "/proc/$pid/exe")" = /usr/sbin/dlockd ]
}
wait_for "a new agent, running the new binary" 60 new_agent
# The new agent took both leases over, with their fencing tokens.
leases_are() { [ "$(leases)" = "$expected" ]; }
wait_for "the new agent lists both leases ($expected)" 60 leases_are
# By a restart job: the old agent left both leases, the new one took them.
restarted() {
    local log
    log=$(in_ct journalctl --no-pager -u dlockd.service)
    grep -q 'restarts the agent: leaving 2 lease(s) of 2 connection(s) to a successor' <<<"$log" &&
        grep -q 'took over 2 lease(s) of 2 connection(s) from the previous agent' <<<"$log"
}
wait_for "the journal tells a restart that left both leases to the new agent" 60 restarted
kill -0 "$shell_pid" 2>/dev/null || fail "the dlockctl run holder ended during the upgrade"
kill -0 "$python_pid" 2>/dev/null || fail "the Python holder ended during the upgrade"

# ---------------------------------------------------------------------------
step "6. the holders end their work"
in_ct touch /tmp/go
rc=0
wait "$shell_pid" || rc=$?
must_equal "dlockctl run's exit status (CMD's)" 0 "$rc"
must_equal "the CMD's output" "start $shell_fence
end $shell_fence" "$(cat "$tmp/shell.out")"
rc=0
wait "$python_pid" || rc=$?
must_equal "the Python holder's exit status" 0 "$rc"
must_equal "the Python holder's lease at the end" "state held valid True fence $python_fence" \
    "$(sed -n 's/^state /state /p' "$tmp/python.out")"
events=$(sed -n 's/^events //p' "$tmp/python.out")
# At most a JEOPARDY for the restart (DLOCK_ERESTART, -31), then HELD again.
case "$events" in
none | "jeopardy:-31,held:0") ;;
*) fail "the Python holder's events: expected none or 'jeopardy:-31,held:0', got '$events'" ;;
esac
grep -qx released "$tmp/python.out" || fail "the Python holder's release failed"
must_equal "the leases after both released" "" "$(leases)"

# ---------------------------------------------------------------------------
step "7. systemctl stop dlockd: a stop ends a lease (LOST, DLOCK_ESHUTDOWN)"
in_ct_bg dlockctl run -w 60s upgrade:stop -- sh -c 'echo started; exec sleep 600' >"$tmp/stop.out" 2>&1 &
stop_pid=$!
wait_for "the third holder's CMD started" 60 grep -qx started "$tmp/stop.out"
in_ct systemctl stop dlockd.service dlockd.socket
rc=0
wait "$stop_pid" || rc=$?
# dlockctl run: 79 when the lease was lost and CMD was ended for it.
must_equal "dlockctl run's exit status after a stop" 79 "$rc"

step "OK: an upgrade with apt-get restarted the agent ($old_pid, then a new process of $newer) \
and its holders kept their leases (events: $events); a stop ended them"
