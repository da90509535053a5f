#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# check-docker.sh DLOCKD SOURCE_DIR -- the example deployment of
# packaging/docker (docs/deployment.md).
#
# Always, on the files (DLOCKD: the built agent, for its --help):
#  - the Dockerfile starts from debian:12-slim, copies only what exists in
#    the source tree (every COPY/ADD source but those of another stage),
#    installs the Debian package of every library the top CMakeLists.txt looks
#    for, which .ci/run installs too, and runs the agent as the user dlock;
#  - compose.yaml (read with PyYAML when python3 has it, else by simple line
#    rules) has the services redis (redis:7), agent (built from the
#    Dockerfile) and client; the agent and the client mount one named volume
#    at the directory of the client socket of the packaged configuration; the
#    agent runs dlockd with options that `dlockd --help` lists, without
#    --dev, checked by `dlockctl status`; the client runs `dlockctl run demo`.
# Then, when a Docker daemon answers `docker info` and `docker compose`
# exists: builds and starts the stack under a project name of its own, waits
# (bounded) until the client says it holds demo with a fencing token, and
# takes the stack down with its volume. Otherwise it says "static check only".
#
# Exits 0 when everything checked holds, or 1 naming the first check that
# failed.
set -Eeuo pipefail

if [ $# -ne 2 ] || [ ! -x "$1" ] || [ ! -f "$2/packaging/docker/Dockerfile" ]; then
    echo "usage: $0 DLOCKD SOURCE_DIR (the built dlockd, and the source tree)" >&2
    exit 2
fi
dlockd=$1
src=$(cd "$2" && pwd)
dir=$src/packaging/docker
dockerfile=$dir/Dockerfile
compose_file=$dir/compose.yaml

fail() {
    echo "check-docker: FAIL: $*" >&2
    exit 1
}
trap 'fail "command failed (line $LINENO): $BASH_COMMAND"' ERR
step() { echo "check-docker: $*"; }

[ -f "$compose_file" ] || fail "no packaging/docker/compose.yaml"

# ---------------------------------------------------------------------------
step "the Dockerfile"
# Its instructions, one a line (continuation lines joined), comments out.
instructions=$(sed -e '/^[[:space:]]*#/d' "$dockerfile" | sed -e ':a' -e '/\\$/{N; s/\\\n/ /; ba}')

froms=$(awk 'toupper($1) == "FROM" { print $2 }' <<<"$instructions" | sort -u)
[ "$froms" = "debian:12-slim" ] || fail "every stage starts FROM debian:12-slim, not: $froms"

# COPY and ADD: every source (all words but the last, options and copies from
# another stage aside) is in the source tree, the build context.
copies=0
while read -r -a words; do
    [ "${#words[@]}" -gt 0 ] || continue
    case "${words[0]^^}" in COPY | ADD) ;; *) continue ;; esac
    args=()
    from_stage=
    for w in "${words[@]:1}"; do
        case $w in
        --from=*) from_stage=1 ;;
        --*) ;;
        *) args+=("$w") ;;
        esac
    done
    [ -z "$from_stage" ] || continue
    [ "${#args[@]}" -ge 2 ] || fail "a ${words[0]} without a source and a destination: ${words[*]}"
    for s in "${args[@]:0:${#args[@]}-1}"; do
        case $s in
        /* | *..* | http://* | https://*) fail "${words[0]} $s: not a path inside the source tree" ;;
        esac
        [ -e "$src/$s" ] || fail "${words[0]} $s: no such file or directory in the source tree"
        [ "$s" != . ] || fail "COPY . copies the whole tree, build directories included"
        copies=$((copies + 1))
    done
done <<<"$instructions"
[ "$copies" -gt 0 ] || fail "no COPY of the sources in the Dockerfile"

# The packages its build installs: every word after `apt-get install` up to
# the end of that command.
installed=$(grep -oE 'apt-get install[^&;|]*' <<<"$instructions" | tr ' ' '\n' |
    grep -E '^[a-z0-9][a-z0-9.+-]+$' | grep -vxE 'apt-get|install' | sort -u)
ci_installed=$(sed -e ':a' -e '/\\$/{N; s/\\\n/ /; ba}' "$src/.ci/run" |
    grep -oE 'apt-get install[^&;|]*' | tr ' ' '\n' | sort -u)
# What the C build needs: CMake, pkg-config, a C compiler, and the Debian
# package of every library the top CMakeLists.txt looks for. A library not
# in this table fails the test: add its package here and to the Dockerfile.
needed="cmake pkg-config build-essential"
cmakelists=$src/CMakeLists.txt
for module in $(sed -n 's/^ *pkg_check_modules([A-Z_]* REQUIRED IMPORTED_TARGET \([a-z0-9_-]*\)).*/\1/p' \
    "$cmakelists") $(sed -n 's/^ *find_package(\([A-Za-z0-9_]*\).*/\1/p' "$cmakelists") \
    $(sed -n 's/^ *find_library([A-Z_]* \([a-z0-9_]*\) .*/lib\1/p' "$cmakelists"); do
    case $module in
    hiredis) needed+=" libhiredis-dev" ;;
    inih) needed+=" libinih-dev" ;;
    libsystemd) needed+=" libsystemd-dev" ;;
    OpenSSL) needed+=" libssl-dev" ;;
    libev) needed+=" libev-dev" ;;
    PkgConfig | Threads) ;;
    *) fail "CMakeLists.txt looks for $module: add its Debian package to this test and the Dockerfile" ;;
    esac
done
for p in $needed; do
    grep -qx -- "$p" <<<"$installed" || fail "the Dockerfile does not install $p, which the build needs"
    grep -qx -- "$p" <<<"$ci_installed" || fail ".ci/run does not install $p, which the build needs"
done
step "   $copies COPY sources exist; the build installs $(paste -sd ' ' <<<"$needed")"

users=$(awk 'toupper($1) == "USER" { print $2 }' <<<"$instructions")
[ "$(tail -n 1 <<<"$users")" = dlock ] || fail "the image does not run as the user dlock (USER: $users)"
! grep -q -- '--dev' "$dockerfile" "$compose_file" || fail "--dev in the Dockerfile or compose.yaml"

# ---------------------------------------------------------------------------
# The client socket of the packaged configuration, whose directory the volume
# must be.
socket=$(sed -n 's/^socket *= *//p' "$src/packaging/dlockd.conf")
rundir=$(dirname "$socket")
help=$("$dlockd" --help 2>&1) || fail "$dlockd --help failed: $help"

if python3 -c 'import yaml' 2>/dev/null; then
    step "compose.yaml, read with PyYAML"
    out=$(python3 - "$compose_file" "$rundir" "$src" <<'EOF' 2>&1
import os, re, sys, yaml
path, rundir, src = sys.argv[1:]
with open(path, encoding="utf-8") as f:
    doc = yaml.safe_load(f)
def need(cond, msg):
    if not cond:
        print(msg)
        sys.exit(1)
services = doc.get("services") or {}
for name in ("redis", "agent", "client"):
    need(name in services, "no service %s" % name)
redis, agent, client = services["redis"], services["agent"], services["client"]
need(str(redis.get("image", "")).startswith("redis:7"), "redis: image is not redis:7")
build = agent.get("build") or {}
need(isinstance(build, dict), "agent: build is not a mapping with context and dockerfile")
context = os.path.normpath(os.path.join(os.path.dirname(path), build.get("context", ".")))
need(context == os.path.normpath(src), "agent: build context %s is not the source tree" % context)
dockerfile = os.path.join(context, build.get("dockerfile", "Dockerfile"))
need(os.path.normpath(dockerfile) == os.path.normpath(os.path.join(src, "packaging/docker/Dockerfile")),
     "agent: not built from packaging/docker/Dockerfile")
need(agent.get("user", "dlock") == "dlock", "agent: runs as %s, not dlock" % agent.get("user"))
named = set((doc.get("volumes") or {}).keys())
def mounts(svc):
    out = set()
    for v in svc.get("volumes") or []:
        if isinstance(v, str):
            parts = v.split(":")
            if len(parts) >= 2:
                out.add((parts[0], parts[1]))
        elif isinstance(v, dict):
            out.add((v.get("source"), v.get("target")))
    return {m for m in out if m[0] in named}
shared = mounts(agent) & mounts(client)
need(any(t == rundir for _, t in shared),
     "agent and client share no named volume at %s (agent: %s, client: %s)"
     % (rundir, sorted(mounts(agent)), sorted(mounts(client))))
cmd = agent.get("command")
need(isinstance(cmd, list) and cmd and cmd[0] == "dlockd", "agent: command is not a list starting with dlockd")
print("OPTIONS " + " ".join(w.split("=")[0] for w in cmd[1:] if w.startswith("-")))
health = (agent.get("healthcheck") or {}).get("test") or []
need("dlockctl" in health and "status" in health, "agent: the health check is not dlockctl status")
ccmd = client.get("command")
ctext = " ".join(ccmd) if isinstance(ccmd, list) else str(ccmd)
need(re.search(r"dlockctl run\b[^\n]*\sdemo(\s|$)", ctext), "client: does not run dlockctl run ... demo")
EOF
    ) || fail "compose.yaml: $out"
    options=$(sed -n 's/^OPTIONS //p' <<<"$out")
else
    step "compose.yaml, by line rules (no PyYAML)"
    for s in redis agent client; do
        grep -qE "^  $s:[[:space:]]*$" "$compose_file" || fail "compose.yaml: no service $s"
    done
    grep -qE '^[[:space:]]+image:[[:space:]]*"?redis:7' "$compose_file" || fail "compose.yaml: no redis:7"
    grep -qE 'dockerfile:[[:space:]]*packaging/docker/Dockerfile' "$compose_file" ||
        fail "compose.yaml: the agent is not built from packaging/docker/Dockerfile"
    mount=$(grep -oE "^[[:space:]]+- [A-Za-z0-9_.-]+:$rundir\$" "$compose_file" | sed 's/^[[:space:]]*- //' |
        sort | uniq -c | awk '$1 >= 2 { print $2; exit }')
    [ -n "$mount" ] || fail "compose.yaml: no named volume mounted at $rundir by two services"
    grep -qE "^  ${mount%%:*}:" "$compose_file" || fail "compose.yaml: the volume ${mount%%:*} is not declared"
    line=$(grep -E '^[[:space:]]+command:[[:space:]]*\["dlockd"' "$compose_file") ||
        fail "compose.yaml: no agent command [\"dlockd\", ...]"
    options=$(grep -oE '"-[-a-zA-Z]*' <<<"$line" | tr -d '"' | paste -sd ' ')
    grep -qE 'test:.*"dlockctl", *"status"' "$compose_file" || fail "compose.yaml: no dlockctl status health check"
    grep -qE 'dlockctl run .*[[:space:]]demo([[:space:]]|$)' "$compose_file" || fail "compose.yaml: the client runs no dlockctl run demo"
fi
[ -n "$options" ] || fail "compose.yaml: the agent's command has no options"
for opt in $options; do
    grep -qE -- "(^|[ ,\[])$opt([ ,=]|\]|$)" <<<"$help" || fail "dlockd --help lists no option $opt"
done
step "   services redis, agent, client; the volume at $rundir shared; dlockd options $options"

# ---------------------------------------------------------------------------
if ! command -v docker >/dev/null || ! timeout 30 docker info >/dev/null 2>&1; then
    step "static check only: no Docker daemon answers docker info"
    exit 0
fi
if ! docker compose version >/dev/null 2>&1; then
    step "static check only: a Docker daemon answers, but docker compose is missing"
    exit 0
fi

step "docker compose: build and run the stack"
project=dlock-check-$$
compose=(docker compose -p "$project" -f "$compose_file")
down() { "${compose[@]}" down -v --remove-orphans >/dev/null 2>&1 || true; }
trap 'down' EXIT
timeout 1200 "${compose[@]}" build >"${TMPDIR:-/tmp}/$project.build.log" 2>&1 ||
    fail "docker compose build: $(tail -n 30 "${TMPDIR:-/tmp}/$project.build.log")"
rm -f "${TMPDIR:-/tmp}/$project.build.log"
"${compose[@]}" up -d >/dev/null 2>&1 || fail "docker compose up: $("${compose[@]}" logs 2>&1 | tail -n 30)"
# The client's lines, until one says it holds demo: 3 minutes at most.
deadline=$((SECONDS + 180))
until "${compose[@]}" logs client 2>/dev/null | grep -qE 'holds demo, fencing token [0-9]+'; do
    [ "$SECONDS" -lt "$deadline" ] ||
        fail "the client did not take demo within 180 s: $("${compose[@]}" logs 2>&1 | tail -n 40)"
    sleep 2
done
status=$("${compose[@]}" exec -T agent dlockctl status 2>&1) || fail "dlockctl status in the agent: $status"
step "   $("${compose[@]}" logs client 2>/dev/null | grep -m 1 -oE 'holds demo, fencing token [0-9]+')"
step "OK: the stack runs and its client takes the lock"
