#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# check-service.sh BUILD_DIR SOURCE_DIR -- the installed service, as its
# users meet it.
#
# Installs the build as the Debian package lays it out (DESTDIR, prefix
# /usr), creates the dlock user and group from the package's sysusers.d
# file (as its postinst does) and gives the configuration to root:dlock
# 0640, then, in private mount and network namespaces (a /run of its own, a
# loopback where the packaged address 127.0.0.1:6379 is free for a
# redis-server of the test), runs the unit's ExecStartPre and ExecStart
# under the unit's User= and Group=, unchanged, and checks:
#
#  - the configuration check passes and the agent logs no error;
#  - the client socket is dlock:dlock 0660, in the runtime directory;
#  - a user (uid 61001) in group dlock takes a lock with dlockctl, and sees
#    the status socket;
#  - a user outside it (uid 61002) is refused with a message that names the
#    socket and the reason;
#  - other users cannot read the configuration, where the password goes;
#  - the unit's ExecReload, as dlock, reloads the agent and waits for it; a
#    member of group dlock may not;
#  - SIGTERM stops the agent with status 0.
#
# Needs root (users, namespaces, setpriv): exits 77 (skipped) without it.
set -Eeuo pipefail

build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
cmake=${CMAKE:-cmake}
if [ "$(id -u)" != 0 ] || ! command -v setpriv >/dev/null || ! command -v unshare >/dev/null; then
    echo "check-service: needs root, setpriv and unshare; skipped"
    exit 77
fi
command -v redis-server >/dev/null || { echo "check-service: no redis-server" >&2; exit 1; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/dlock-service.XXXXXX")
chmod 0755 "$tmp"
trap 'rm -rf "$tmp"' EXIT
fail() {
    echo "check-service: FAIL: $*" >&2
    for f in "$tmp"/*.log "$tmp"/*.out; do
        [ -f "$f" ] && { echo "--- $f" >&2; tail -n 20 "$f" >&2; }
    done
    exit 1
}
step() { echo "check-service: $*"; }

step "install as the package does (DESTDIR, prefix /usr)"
root=$tmp/root
DESTDIR=$root "$cmake" --install "$build" --prefix /usr >/dev/null
unit=$(find "$root" -name dlockd.service | head -n 1)
[ -f "$unit" ] || fail "no dlockd.service installed"
conf=$root/etc/dlock/dlockd.conf
[ -f "$conf" ] || fail "no /etc/dlock/dlockd.conf installed"

step "the dlock user and group, as the postinst makes them"
sysusers=$(find "$root" -path '*sysusers.d/*dlock*' | head -n 1)
if [ -n "$sysusers" ] && command -v systemd-sysusers >/dev/null; then
    systemd-sysusers "$sysusers"
elif ! getent passwd dlock >/dev/null; then
    getent group dlock >/dev/null || groupadd --system dlock
    useradd --system --gid dlock --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin dlock
fi
getent passwd dlock >/dev/null || fail "no dlock user"
dlock_gid=$(getent group dlock | cut -d: -f3)
chgrp dlock "$conf"
chmod 0640 "$conf"

# The unit's user and commands, as written in it.
unit_value() { sed -n "s/^$1=//p" "$unit" | head -n 1; }
[ "$(unit_value User)" = dlock ] || fail "the unit does not run as User=dlock"
[ "$(unit_value Group)" = dlock ] || fail "the unit does not run as Group=dlock"
[ "$(unit_value RuntimeDirectory)" = dlock ] || fail "the unit has no RuntimeDirectory=dlock"
nofile=$(unit_value LimitNOFILE)
# Its programs and files under the staged root.
staged() { sed "s| /| $root/|g; s|^/|$root/|" <<<"$1"; }
pre=$(staged "$(unit_value ExecStartPre)")
start=$(staged "$(unit_value ExecStart)")
# ExecReload's program only: its -S names the status socket in /run.
reload=$root$(unit_value ExecReload)
libdir=$(dirname "$(find "$root" -name 'libdlock.so.*' | head -n 1)")
dlockctl=$root/usr/bin/dlockctl
[ -x "$dlockctl" ] || fail "no /usr/bin/dlockctl installed"

step "unreadable configuration for others"
if setpriv --reuid 61002 --regid 61002 --clear-groups cat "$conf" >/dev/null 2>&1; then
    fail "a user outside group dlock can read $conf"
fi

# The rest runs in namespaces of its own: /run is a fresh tmpfs where the
# runtime directory is made as systemd makes it, and the loopback is private.
cat >"$tmp/inside.sh" <<'EOF'
set -Eeuo pipefail
fail() { echo "check-service: FAIL: $*" >&2; exit 1; }
mount -t tmpfs -o mode=0755 tmpfs /run
ip link set lo up
install -d -o dlock -g dlock -m 0755 /run/dlock
agent=
redis-server --port 6379 --bind 127.0.0.1 --save '' --appendonly no \
    --daemonize no >"$TMP/redis.log" 2>&1 &
redis=$!
# Nothing of the test outlives it, also when a check fails half way.
trap 'st=$?; kill $agent $redis 2>/dev/null || true; wait 2>/dev/null || true; exit $st' EXIT
for _ in $(seq 100); do
    redis-cli -p 6379 ping 2>/dev/null | grep -q PONG && break
    sleep 0.05
done
as_dlock() {
    exec setpriv --reuid dlock --regid dlock --init-groups "$@"
}
export LD_LIBRARY_PATH=$LIBDIR
# LimitNOFILE=, as far as this machine's hard limit lets root go.
if [ -n "$NOFILE" ]; then
    ulimit -n "$NOFILE" 2>/dev/null || ulimit -n "$(ulimit -Hn)"
fi
out=$(as_dlock $PRE 2>&1) || fail "ExecStartPre failed: $out"
[ "$out" = "configuration OK" ] || fail "ExecStartPre said: $out"
as_dlock $START 2>"$TMP/agent.log" &
agent=$!
for _ in $(seq 200); do
    [ -S /run/dlock/dlock.sock ] && grep -q 'Redis' "$TMP/agent.log" 2>/dev/null && break
    kill -0 "$agent" 2>/dev/null || fail "the agent exited"
    sleep 0.05
done
[ -S /run/dlock/dlock.sock ] || fail "no /run/dlock/dlock.sock"
perm=$(stat -c '%U:%G %a' /run/dlock/dlock.sock)
[ "$perm" = "dlock:dlock 660" ] || fail "client socket is $perm, not dlock:dlock 660"

member() { setpriv --reuid 61001 --regid 61001 --groups "$DLOCK_GID" "$@"; }
outsider() { setpriv --reuid 61002 --regid 61002 --clear-groups "$@"; }
out=$(member "$DLOCKCTL" run --wait 10 service-test -- sh -c 'echo "fence=$DLOCK_FENCE"' 2>&1) ||
    fail "a member of group dlock could not lock: $out"
echo "$out" | grep -q '^fence=[1-9]' || fail "no fencing token passed on: $out"
member "$DLOCKCTL" status >"$TMP/status.out" 2>&1 || fail "a member cannot read the status"
rc=0
outsider "$DLOCKCTL" run service-test -- true >"$TMP/refused.out" 2>&1 || rc=$?
# 77 (EX_NOPERM): not 69, which says the agent is down.
[ "$rc" = 77 ] || fail "a user outside group dlock got exit $rc, not 77"
grep -q '/run/dlock/dlock.sock' "$TMP/refused.out" || fail "the refusal does not name the socket"
grep -qi 'permission denied' "$TMP/refused.out" || fail "the refusal does not give the reason"
grep -q 'group .dlock' "$TMP/refused.out" || fail "the refusal does not name the group to join"
out=$(as_dlock $RELOAD 2>&1) || fail "ExecReload failed: $out"
grep -q 'no setting changed' <<<"$out" || fail "ExecReload said: $out"
rc=0
member "$DLOCKCTL" reload >"$TMP/reload.out" 2>&1 || rc=$?
[ "$rc" = 77 ] || fail "a member of group dlock asked for a reload: exit $rc, not 77"
kill -TERM "$agent"
st=0
wait "$agent" || st=$?
[ "$st" = 0 ] || fail "the agent exited $st on SIGTERM, not 0"
! grep -E 'dlockd\[error\]|^<3>' "$TMP/agent.log" || fail "the agent logged an error"
kill "$redis"
wait "$redis" 2>/dev/null || true
EOF

step "ExecStartPre, ExecStart and ExecReload as dlock; a member and an outsider"
TMP=$tmp PRE=$pre START=$start RELOAD=$reload LIBDIR=$libdir NOFILE=$nofile DLOCKCTL=$dlockctl \
    DLOCK_GID=$dlock_gid unshare --mount --net --propagation private bash "$tmp/inside.sh" ||
    fail "the service checks failed"
step "the installed service serves a member of group dlock and refuses others"
