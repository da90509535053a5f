#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# check-journal.sh BUILD_DIR -- the agent under a real systemd-journald.
#
# In a private mount namespace (a /run of its own, so the host's journal is
# neither seen nor touched) it starts systemd-journald with volatile storage,
# runs dlockd with its standard error on a journal stream (systemd-cat, and
# $JOURNAL_STREAM naming it, as systemd sets it for a service), has dlockctl
# take a lock whose name holds a quote and a byte outside UTF-8 and be
# refused another by the policy, and checks with journalctl that:
#
#  - the entries are sent as entries of their own (_TRANSPORT=journal),
#    SYSLOG_IDENTIFIER=dlockd, with the level's PRIORITY;
#  - journalctl LOCK_NAME=NAME finds the grant by the name's exact bytes,
#    with LEASE_ID, FENCE, CLIENT_PID and CLIENT_UID, and the denial;
#  - after a reload to log_format = json, an entry's MESSAGE is its json line.
#
# Needs root, unshare, systemd-journald and journalctl: exits 77 (skipped)
# without them.
set -Eeuo pipefail

build=$(cd "$1" && pwd)
journald=/lib/systemd/systemd-journald
if [ "$(id -u)" != 0 ] || ! command -v unshare >/dev/null || [ ! -x "$journald" ] ||
    ! command -v journalctl >/dev/null || ! command -v systemd-cat >/dev/null; then
    echo "check-journal: needs root, unshare, systemd-journald, journalctl and systemd-cat; skipped"
    exit 77
fi
command -v redis-server >/dev/null || { echo "check-journal: no redis-server" >&2; exit 1; }
# A private mount namespace must be possible here (not in every container).
unshare -m true 2>/dev/null || { echo "check-journal: no mount namespace here; skipped"; exit 77; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/dlock-journal.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

cat >"$tmp/inside.sh" <<'INSIDE'
set -Eeuo pipefail
fail() {
    echo "check-journal: FAIL: $*" >&2
    journalctl -D /run/log/journal --no-pager -o verbose 2>/dev/null | tail -n 60 >&2 || true
    exit 1
}
step() { echo "check-journal: $*"; }
mount --make-rprivate /
mount -t tmpfs -o mode=0755 tmpfs /run
mkdir -p /run/systemd/journal /run/systemd/journald.conf.d
cat >/run/systemd/journald.conf.d/test.conf <<EOC
[Journal]
Storage=volatile
ReadKMsg=no
ForwardToSyslog=no
ForwardToKMsg=no
ForwardToConsole=no
ForwardToWall=no
RateLimitBurst=0
EOC
journald= redis= agent=
trap 'st=$?; kill $agent $redis $journald 2>/dev/null || true; wait 2>/dev/null || true; exit $st' EXIT
"$JOURNALD" >"$TMP/journald.log" 2>&1 &
journald=$!
for _ in $(seq 200); do
    [ -S /run/systemd/journal/socket ] && [ -S /run/systemd/journal/stdout ] && break
    sleep 0.05
done
[ -S /run/systemd/journal/stdout ] || { echo "check-journal: journald did not start here; skipped"; exit 77; }

redis-server --port 0 --unixsocket "$TMP/redis.sock" --save '' --appendonly no \
    --daemonize no >"$TMP/redis.log" 2>&1 &
redis=$!
for _ in $(seq 200); do [ -S "$TMP/redis.sock" ] && break; sleep 0.05; done
conf() {
    cat >"$TMP/dlockd.conf" <<EOC
[agent]
socket = $TMP/dlock.sock
status_socket = $TMP/status.sock
log_level = debug
log_format = $1
[policy]
allow = * ok*
[redis]
address = unix:$TMP/redis.sock
EOC
}
conf plain
# As systemd runs a service: stderr is a stream to journald, and
# $JOURNAL_STREAM holds its device and inode.
systemd-cat -t dlockd sh -c 'export JOURNAL_STREAM=$(stat -L -c %d:%i /proc/self/fd/2); exec "$0" -c "$1"' \
    "$DLOCKD" "$TMP/dlockd.conf" &
agent=$!
for _ in $(seq 200); do
    [ -S "$TMP/dlock.sock" ] && break
    kill -0 "$agent" 2>/dev/null || fail "the agent exited"
    sleep 0.05
done
[ -S "$TMP/dlock.sock" ] || fail "no client socket"
# The socket comes before Redis answers: the try-once acquires below need
# an agent that can take locks (a busy machine widens the gap).
ready=no
for _ in $(seq 400); do
    "$DLOCKCTL" -S "$TMP/status.sock" health >/dev/null 2>&1 && { ready=yes; break; }
    kill -0 "$agent" 2>/dev/null || fail "the agent exited"
    sleep 0.05
done
[ "$ready" = yes ] || fail "the agent never became ready"

J() { journalctl -D /run/log/journal --no-pager "$@"; }
# Waits until journalctl with these arguments prints something.
wait_for() {
    for _ in $(seq 200); do
        [ -n "$(J "$@" 2>/dev/null)" ] && return 0
        sleep 0.05
    done
    fail "nothing in the journal for: $*"
}

name=$(printf 'ok"q\xff')
step "a grant, and a denial by the policy"
"$DLOCKCTL" -s "$TMP/dlock.sock" run -n "$name" -- true || fail "dlockctl run failed"
rc=0
"$DLOCKCTL" -s "$TMP/dlock.sock" run -n 'nope"x' -- true 2>/dev/null || rc=$?
[ "$rc" = 77 ] || fail "the denied lock: exit $rc, not 77"

step "journalctl LOCK_NAME= finds the grant by the name's bytes, with its fields"
wait_for "LOCK_NAME=$name" -o cat
J "LOCK_NAME=$name" -o export >"$TMP/grant.export"
# Text fields of the export format are NAME=value lines; LOCK_NAME, which is
# not UTF-8, is in its binary form and not checked here byte by byte.
grep -a -q '^MESSAGE=granted ok"q\\xff to pid [0-9]* (lease [0-9a-f]*, fence [0-9]*)$' \
    "$TMP/grant.export" || fail "no grant message: $(grep -a '^MESSAGE=' "$TMP/grant.export")"
for f in '_TRANSPORT=journal' 'SYSLOG_IDENTIFIER=dlockd' 'PRIORITY=7' 'LEASE_ID=[0-9a-f]*' \
    'FENCE=[1-9][0-9]*' 'CLIENT_PID=[1-9][0-9]*' 'CLIENT_UID=0'; do
    grep -a -q "^$f\$" "$TMP/grant.export" || fail "the grant lacks $f"
done
lease=$(grep -a '^LEASE_ID=' "$TMP/grant.export" | head -n 1 | cut -d= -f2)
[ -n "$(J "LEASE_ID=$lease" -o cat)" ] || fail "journalctl LEASE_ID=$lease finds nothing"

step "the denial"
wait_for 'LOCK_NAME=nope"x' -o cat
out=$(J 'LOCK_NAME=nope"x' -o export)
grep -a -q '^MESSAGE=denied: pid [0-9]* uid 0 may not use lock nope"x$' <<<"$out" ||
    fail "no denial message: $out"
grep -a -q '^PRIORITY=6$' <<<"$out" || fail "the denial is not at info: $out"
grep -a -q '^CLIENT_UID=0$' <<<"$out" || fail "the denial lacks CLIENT_UID"

step "after a reload to json, MESSAGE is the json line"
conf json
kill -HUP "$agent"
wait_for 'MESSAGE=reloaded: [agent] log_format plain -> json'
"$DLOCKCTL" -s "$TMP/dlock.sock" run -n ok-json -- true || fail "dlockctl run failed"
wait_for LOCK_NAME=ok-json -o cat
msg=$(J LOCK_NAME=ok-json -o cat | head -n 1)
grep -q '^{"ts":"[0-9-]*T[0-9:.]*Z","level":"debug","msg":"granted ok-json to pid .*","lock":"ok-json","lease":"[0-9a-f]*","fence":[0-9]*,"pid":[0-9]*,"uid":0}$' \
    <<<"$msg" || fail "not the json line: $msg"

step "nothing went to the stream but what journald could not take"
[ -z "$(J _TRANSPORT=stdout SYSLOG_IDENTIFIER=dlockd -o cat)" ] ||
    fail "lines on the stream: $(J _TRANSPORT=stdout -o cat)"
kill -TERM "$agent"
st=0
wait "$agent" || st=$?
agent=
[ "$st" = 0 ] || fail "the agent exited with $st"
INSIDE

rc=0
TMP=$tmp JOURNALD=$journald DLOCKD=$build/agent/dlockd DLOCKCTL=$build/tools/dlockctl \
    unshare -m bash "$tmp/inside.sh" || rc=$?
[ "$rc" = 0 ] && echo "check-journal: the agent's entries carry their journal fields"
exit "$rc"
