#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Demo: starts dlockd in dev mode (with its own private redis-server), shows
# two holders serialised on one lock and a try-once refusal, then stops the
# agent, which releases everything and removes its temporary directory.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
dlockd=$build/agent/dlockd
dlockctl=$build/tools/dlockctl
work=$(mktemp -d)
trap '[ -n "${agent:-}" ] && kill "$agent" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT

"$dlockd" --dev >"$work/out" 2>"$work/log" &
agent=$!
for _ in $(seq 100); do grep -q '^export' "$work/out" 2>/dev/null && break; sleep 0.05; done
grep -q '^export' "$work/out" || { cat "$work/log"; echo "demo: agent did not start" >&2; exit 1; }
eval "$(grep '^export' "$work/out")"
echo "agent running (pid $agent): $(grep '^export' "$work/out")"

echo "--- A takes 'demo' and holds it for 1 s; B waits for it"
"$dlockctl" run demo -- sh -c 'echo "[A] holding $DLOCK_NAME"; sleep 1; echo "[A] done"' &
a=$!
for _ in $(seq 100); do
    "$dlockctl" run -n demo -- true 2>/dev/null || break
    sleep 0.02
done
set +e
"$dlockctl" run -n demo -- true
echo "[C] try-once while A holds it: exit status $? (75 = lock busy)"
set -e
"$dlockctl" run demo -- sh -c 'echo "[B] got $DLOCK_NAME after A released it"'
wait "$a"

echo "--- stopping the agent (SIGTERM releases every lease)"
kill -TERM "$agent"
wait "$agent" && echo "agent exited cleanly"
agent=
