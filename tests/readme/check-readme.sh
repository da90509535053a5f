#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# check-readme.sh BUILD_DIR SOURCE_DIR -- the README's C example is a
# complete program: it is cut out of README.md, compiled against the built
# library, and run against `dlockd --dev`, where it must take its lock and
# write its three reports. Exits 0, or 1 naming what failed.
set -Eeuo pipefail

build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/dlock-readme.XXXXXX")
agent_pid=
cleanup() {
    if [ -n "$agent_pid" ]; then
        kill "$agent_pid" 2>/dev/null || true
        wait "$agent_pid" 2>/dev/null || true
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
    echo "check-readme: $*" >&2
    [ -f "$tmp/agent.log" ] && tail -n 20 "$tmp/agent.log" >&2
    exit 1
}

# The first C block after the "## The C library" heading.
awk '/^## The C library/ { lib = 1 } lib && /^```c$/ { on = 1; next }
     on && /^```$/ { exit } on { print }' "$src/README.md" >"$tmp/reports.c"
[ -s "$tmp/reports.c" ] || fail "no C example under '## The C library' in README.md"
grep -q 'int main' "$tmp/reports.c" || fail "the README's C example has no main()"

# As a user would build it (warnings on, as errors), against this build
# (with its sanitizers, if it has any).
san=()
[ -n "${DLOCK_SANITIZE:-}" ] && san=("-fsanitize=$DLOCK_SANITIZE")
cc -std=c11 -Wall -Wextra -Werror "${san[@]}" -I"$src/include" "$tmp/reports.c" \
    -L"$build/libclient" -Wl,-rpath,"$build/libclient" -ldlock -o "$tmp/reports" \
    2>"$tmp/cc.out" || { cat "$tmp/cc.out" >&2; fail "the README's C example does not compile"; }

command -v redis-server >/dev/null || fail "redis-server is not on PATH"
"$build/agent/dlockd" --dev >"$tmp/agent.out" 2>"$tmp/agent.log" &
agent_pid=$!
for _ in $(seq 200); do
    grep -q '^export DLOCK_SOCKET=' "$tmp/agent.out" 2>/dev/null && break
    kill -0 "$agent_pid" 2>/dev/null || fail "dlockd --dev exited"
    sleep 0.05
done
grep -q '^export DLOCK_SOCKET=' "$tmp/agent.out" || fail "dlockd --dev did not come up"
eval "$(grep '^export DLOCK_SOCKET=' "$tmp/agent.out")"

"$tmp/reports" >"$tmp/run.out" 2>&1 || { cat "$tmp/run.out" >&2; fail "the example failed"; }
[ "$(grep -c '^report [123], fencing token [1-9][0-9]*$' "$tmp/run.out")" = 3 ] ||
    { cat "$tmp/run.out" >&2; fail "the example did not write its three reports"; }
kill "$agent_pid"
wait "$agent_pid" || fail "dlockd --dev did not exit cleanly"
agent_pid=
echo "check-readme: the README's C example compiles and runs"
