#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# check-completion.sh SRCDIR -- packaging/dlockctl.bash-completion, run by
# bash's own completion machinery (the bash-completion package's helpers when
# installed, else minimal stand-ins): the commands, lock's and unlock's
# options, lock names from `dlockctl leases`, and TTLs that the agent's
# shipped bounds (min_ttl_ms, max_ttl_ms of packaging/dlockd.conf) accept.
set -u
src=${1:?usage: check-completion.sh SRCDIR}
fails=0
fail() {
    echo "FAIL: $*" >&2
    fails=$((fails + 1))
}

if [ -r /usr/share/bash-completion/bash_completion ]; then
    # shellcheck disable=SC1091
    . /usr/share/bash-completion/bash_completion
fi
if ! declare -F _init_completion >/dev/null; then
    _init_completion() {
        words=("${COMP_WORDS[@]}")
        cword=$COMP_CWORD
        cur=${COMP_WORDS[COMP_CWORD]}
        prev=${COMP_WORDS[COMP_CWORD - 1]}
    }
    _filedir() { COMPREPLY=(FILE); }
    _command_offset() { COMPREPLY=(COMMAND); }
fi
# shellcheck disable=SC1091
. "$src/packaging/dlockctl.bash-completion"

# `dlockctl leases` for the completion: a stand-in, called as words[0].
fake_dlockctl() {
    [ "${*: -1}" = leases ] || return 1
    printf 'NAME STATE\nbuild held\nbackup held\n'
}

# The completions of the words given (the last one is the word completed),
# one a line, sorted.
complete_words() {
    COMP_WORDS=(fake_dlockctl "$@")
    COMP_CWORD=$#
    COMP_LINE="${COMP_WORDS[*]}"
    COMP_POINT=${#COMP_LINE}
    COMPREPLY=()
    _dlockctl
    [ "${#COMPREPLY[@]}" -eq 0 ] || printf '%s\n' "${COMPREPLY[@]}" | sort
}

has() { # has WORD LIST...
    local w=$1
    shift
    printf '%s\n' "$@" | grep -qx -- "$w"
}

# A duration of dlockctl (seconds, or ms, s, m, h) in milliseconds.
duration_ms() {
    awk -v d="$1" 'BEGIN {
        n = d; u = 1000
        if (d ~ /ms$/) { n = substr(d, 1, length(d) - 2); u = 1 }
        else if (d ~ /s$/) { n = substr(d, 1, length(d) - 1) }
        else if (d ~ /m$/) { n = substr(d, 1, length(d) - 1); u = 60000 }
        else if (d ~ /h$/) { n = substr(d, 1, length(d) - 1); u = 3600000 }
        if (n !~ /^[0-9]*\.?[0-9]+$/) { print -1; exit }
        printf "%d\n", n * u
    }'
}

conf_value() {
    sed -n "s/^$1 *= *\\([0-9]*\\).*/\\1/p" "$src/packaging/dlockd.conf"
}
min=$(conf_value min_ttl_ms)
max=$(conf_value max_ttl_ms)
[ -n "$min" ] && [ -n "$max" ] || fail "no min_ttl_ms or max_ttl_ms in packaging/dlockd.conf"

for cmd in run lock; do
    mapfile -t ttls < <(complete_words "$cmd" -t "")
    [ "${#ttls[@]}" -gt 0 ] || fail "$cmd -t: nothing offered"
    for t in "${ttls[@]}"; do
        ms=$(duration_ms "$t")
        if [ "$ms" -lt "${min:-0}" ] || [ "$ms" -gt "${max:-0}" ]; then
            fail "$cmd -t offers $t ($ms ms), outside the agent's $min..$max ms"
        fi
    done
done

mapfile -t got < <(complete_words "")
for c in run lock unlock status leases metrics holder reload; do
    has "$c" "${got[@]}" || fail "command $c not offered: ${got[*]}"
done
mapfile -t got < <(complete_words lo)
[ "${got[*]}" = lock ] || fail "'lo' gives '${got[*]}', not lock"

mapfile -t got < <(complete_words lock --)
for o in --pid --wait --ttl --shared --nonblock --conflict-exit-code; do
    has "$o" "${got[@]}" || fail "lock: $o not offered: ${got[*]}"
done
has --kill-after "${got[@]}" && fail "lock offers run's --kill-after"
mapfile -t got < <(complete_words unlock --)
[ "${got[*]}" = "--help --holder --pid --socket" ] || fail "unlock offers: ${got[*]}"

# Lock names the agent holds; after lock's -S (--shared) too, as for run.
mapfile -t got < <(complete_words lock b)
[ "${got[*]}" = "backup build" ] || fail "lock b: ${got[*]}"
mapfile -t got < <(complete_words lock -S bu)
[ "${got[*]}" = build ] || fail "lock -S bu: ${got[*]}"
mapfile -t got < <(complete_words unlock --pid 42 b)
[ "${got[*]}" = "backup build" ] || fail "unlock --pid 42 b: ${got[*]}"
mapfile -t got < <(complete_words lock --pid "")
[ "${#got[@]}" -eq 0 ] || fail "lock --pid offers: ${got[*]}"

if [ "$fails" -ne 0 ]; then
    echo "$fails failure(s)" >&2
    exit 1
fi
echo "completion: all checks passed"
