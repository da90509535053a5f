#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# mutate.sh -- a mutation run of dlock-sim (tests/sim/README.md, "Mutation run"):
# copies the source tree to a temporary directory, builds dlock-sim once with
# each mutant of tests/sim/mutants.txt applied, runs a seed budget in each mode
# the mutant names, and prints caught or MISSED for each, with the check that
# fired, the first seed that caught it and its mode. The working tree is left
# alone.
set -euo pipefail

usage() {
    cat <<'EOF'
usage: tests/sim/mutate.sh [--seeds N] [--quorum-seeds N] [--first S] [--only ID[,ID...]]
                           [--mutants FILE] [--jobs J] [--seed-timeout S] [--task-timeout S]
                           [--no-baseline] [--keep] [--list]
  --seeds N          seeds per mode (default 3000)
  --quorum-seeds N   seeds in quorum mode (default: as --seeds)
  --first S          the first seed of every range (default 1)
  --only IDS         run only these mutants (comma-separated)
  --mutants FILE     the list of mutants (default tests/sim/mutants.txt)
  --jobs J           runs in parallel (default: the number of CPUs)
  --seed-timeout S   a seed that runs longer than S s of real time counts as
                     caught, check "timeout" (default 10)
  --task-timeout S   a mode's whole budget that runs longer than S s is cut
                     short and shown as SLOW (default 60 s + 10 ms a seed)
  --no-baseline      do not run the unchanged core first (it must find nothing)
  --keep             keep the temporary directory (its path is printed)
  --list             list the mutants and check that each still applies
Exit status: 0 when the run completed (caught or MISSED is a result), 1 when
a mutant is STALE (its text is not found exactly once), a build failed, or the
unchanged core found a violation; 2 on a usage error.
EOF
}

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
seeds=3000
qseeds=
first=1
only=
list=0
jobs=$(nproc 2>/dev/null || echo 2)
seed_timeout=10
task_timeout=
baseline=1
keep=0
mutants="$root/tests/sim/mutants.txt"
while (($#)); do
    case $1 in
    --seeds) seeds=${2:?}; shift 2 ;;
    --quorum-seeds) qseeds=${2:?}; shift 2 ;;
    --first) first=${2:?}; shift 2 ;;
    --only) only=${2:?}; shift 2 ;;
    --mutants) mutants=${2:?}; shift 2 ;;
    --jobs) jobs=${2:?}; shift 2 ;;
    --seed-timeout) seed_timeout=${2:?}; shift 2 ;;
    --task-timeout) task_timeout=${2:?}; shift 2 ;;
    --no-baseline) baseline=0; shift ;;
    --keep) keep=1; shift ;;
    --list) list=1; shift ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
    esac
done
qseeds=${qseeds:-$seeds}
for n in "$seeds" "$qseeds" "$first" "$jobs" "$seed_timeout" "${task_timeout:-1}"; do
    [[ $n =~ ^[0-9]+$ && $n -gt 0 ]] || { usage >&2; exit 2; }
done
[[ -r $mutants ]] || { echo "mutate.sh: cannot read $mutants" >&2; exit 2; }

# ---- the list of mutants ----
# Blocks of "[ID]", "file:", "modes:", "breaks:", then "find:" and
# "replace:", each followed by its text verbatim, and "end". Lines starting
# with '#' outside find/replace text are comments.
ids=()
declare -A m_file m_modes m_breaks m_find m_repl
parse_mutants() {
    local id= state= line text=
    local -i n=0 lines=0
    while IFS= read -r line || [[ -n $line ]]; do
        n+=1
        case $state in
        find | replace)
            if [[ $line == replace: && $state == find ]]; then
                m_find[$id]=$text; text=; lines=0; state=replace; continue
            elif [[ $line == end && $state == replace ]]; then
                m_repl[$id]=$text; text=; state=; continue
            fi
            if ((lines++ == 0)); then text=$line; else text+=$'\n'$line; fi
            continue ;;
        esac
        [[ $line =~ ^[[:space:]]*(#|$) ]] && continue
        if [[ $line =~ ^\[([A-Za-z0-9_.-]+)\]$ ]]; then
            id=${BASH_REMATCH[1]}
            [[ -z ${m_file[$id]+x} ]] || { echo "$mutants:$n: mutant $id twice" >&2; exit 2; }
            ids+=("$id"); m_file[$id]=; m_modes[$id]=; m_breaks[$id]=
        elif [[ -z $id ]]; then
            echo "$mutants:$n: text before the first [ID]" >&2; exit 2
        elif [[ $line =~ ^file:[[:space:]]*(.*)$ ]]; then m_file[$id]=${BASH_REMATCH[1]}
        elif [[ $line =~ ^modes:[[:space:]]*(.*)$ ]]; then m_modes[$id]=${BASH_REMATCH[1]}
        elif [[ $line =~ ^breaks:[[:space:]]*(.*)$ ]]; then m_breaks[$id]=${BASH_REMATCH[1]}
        elif [[ $line == find: ]]; then state=find; text=; lines=0
        else
            echo "$mutants:$n: cannot read: $line" >&2; exit 2
        fi
    done <"$mutants"
    [[ -z $state ]] || { echo "$mutants: $id: find/replace without end" >&2; exit 2; }
    for id in "${ids[@]}"; do
        [[ -n ${m_file[$id]} && -n ${m_modes[$id]} && -n ${m_breaks[$id]} && -n ${m_find[$id]+x} &&
            -n ${m_repl[$id]+x} ]] || { echo "$mutants: $id: incomplete" >&2; exit 2; }
    done
}
parse_mutants

if [[ -n $only ]]; then
    sel=()
    IFS=, read -ra want <<<"$only"
    for w in "${want[@]}"; do
        [[ -n ${m_file[$w]+x} ]] || { echo "mutate.sh: no mutant $w" >&2; exit 2; }
        sel+=("$w")
    done
    ids=("${sel[@]}")
fi

# How often the text $2 occurs in the file $1 (0, 1 or 2: "more than
# once"); perl's index() for speed (bash's patterns are slow on a big file).
count_in() {
    FIND=$2 perl -0777 -ne '
        my ($n, $p) = (0, 0);
        while ($n < 2 && ($p = index($_, $ENV{FIND}, $p)) >= 0) { $n++; $p += length($ENV{FIND}) }
        print $n' -- "$1"
}

# Applies mutant $2 in the tree $1 (its text is there exactly once).
apply_mutant() {
    FIND=${m_find[$2]} REPL=${m_repl[$2]} perl -0777 -pi -e '
        substr($_, index($_, $ENV{FIND}), length($ENV{FIND})) = $ENV{REPL}' -- "$1/${m_file[$2]}"
}

stale=()
check_stale() { # $1: the tree
    local id c
    for id in "${ids[@]}"; do
        if [[ ! -f $1/${m_file[$id]} ]]; then
            c=0
        else
            c=$(count_in "$1/${m_file[$id]}" "${m_find[$id]}")
        fi
        if [[ $c != 1 ]]; then
            stale+=("$id")
            printf '%-28s STALE   its text is found %s in %s\n' "$id" \
                "$([[ $c == 0 ]] && echo "nowhere" || echo "more than once")" "${m_file[$id]}"
        fi
    done
}

if ((list)); then
    check_stale "$root"
    for id in "${ids[@]}"; do
        printf '%-28s %-24s %-24s %s\n' "$id" "${m_file[$id]#agent/}" "${m_modes[$id]}" \
            "${m_breaks[$id]}"
    done
    echo "${#ids[@]} mutant(s), ${#stale[@]} stale"
    ((${#stale[@]} == 0))
    exit
fi

# ---- the copy and its build ----
start=$SECONDS
tmp=$(mktemp -d "${TMPDIR:-/tmp}/dlock-mutate.XXXXXX")
# Ends a process of ours and everything it started, by process id.
kill_tree() {
    local c
    for c in $(ps -o pid= --ppid "$1" 2>/dev/null); do kill_tree "$c"; done
    kill "$1" 2>/dev/null || true
}
cleanup() {
    local p
    for p in $(jobs -p); do kill_tree "$p"; done
    if ((keep)); then echo "kept $tmp"; else rm -rf -- "$tmp"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

src=$tmp/src orig=$tmp/orig build=$tmp/build bin=$tmp/bin res=$tmp/results
mkdir -p "$src" "$bin" "$res"
if git -C "$root" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    # Tracked and new files, as they are in the working tree (not ignored ones).
    (cd "$root" && git ls-files -z -co --exclude-standard |
        while IFS= read -r -d '' f; do [[ -f $f ]] && printf '%s\0' "$f"; done |
        tar --null -T - -cf -) | tar -C "$src" -xf -
else
    (cd "$root" && tar --exclude='./build*' -cf - .) | tar -C "$src" -xf -
fi
cp -a "$src" "$orig"

check_stale "$src"
runnable=()
for id in "${ids[@]}"; do
    [[ " ${stale[*]} " == *" $id "* ]] || runnable+=("$id")
done

echo "mutate.sh: configuring a build of dlock-sim in $tmp"
if ! cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release -DDLOCK_BUILD_TESTS=ON \
    -DDLOCK_BUILD_BENCH=OFF -DDLOCK_SIM_PLANTED_BUGS=OFF >"$tmp/configure.log" 2>&1; then
    cat "$tmp/configure.log" >&2
    echo "mutate.sh: configure failed" >&2
    exit 1
fi
build_sim() { cmake --build "$build" --target dlock-sim -j"$jobs" >"$1" 2>&1; }
if ! build_sim "$tmp/build-original.log"; then
    cat "$tmp/build-original.log" >&2
    echo "mutate.sh: the unchanged tree does not build" >&2
    exit 1
fi
cp "$build/tests/sim/dlock-sim" "$bin/ORIGINAL"

# Each mutant's own dlock-sim, one after the other (one tree); the restored
# file gets a new time stamp, so the next build compiles it again.
built=() broken=() unchanged=()
for id in "${runnable[@]}"; do
    apply_mutant "$src" "$id"
    if build_sim "$tmp/build-$id.log"; then
        cp "$build/tests/sim/dlock-sim" "$bin/$id"
        if cmp -s "$bin/$id" "$bin/ORIGINAL"; then unchanged+=("$id"); fi
        built+=("$id")
    else
        broken+=("$id")
    fi
    cp -- "$orig/${m_file[$id]}" "$src/${m_file[$id]}"
done
echo "mutate.sh: built ${#built[@]} mutant(s) in $((SECONDS - start)) s"

# ---- the runs ----
# One task per mutant and mode: "ID MODE". A task's result file holds
# "caught SEED KIND", "missed", "slow" or "error TEXT".
run_task() {
    local id=$1 mode=$2 n=$seeds out line rc
    [[ $mode == quorum ]] && n=$qseeds
    local last=$((first + n - 1)) cap=${task_timeout:-$((60 + n / 100))}
    out=$(timeout "$cap" "$bin/$id" --mode "$mode" --seeds "$first..$last" --stop-first \
        --seed-timeout "$seed_timeout" 2>&1) && rc=0 || rc=$?
    line=$(grep -m1 -E '^(VIOLATION seed=|TIMEOUT seed=)' <<<"$out" || true)
    if [[ $line =~ ^VIOLATION\ seed=([0-9]+)\ kind=(.*)$ ]]; then
        echo "caught ${BASH_REMATCH[1]} ${BASH_REMATCH[2]}"
    elif [[ $line =~ ^TIMEOUT\ seed=([0-9]+)$ ]]; then
        echo "caught ${BASH_REMATCH[1]} timeout"
    elif ((rc == 124)); then
        echo "slow"
    elif ((rc == 0)); then
        echo "missed"
    else
        echo "error exit $rc: $(tail -n1 <<<"$out")"
    fi >"$res/$id.$mode"
}
tasks=()
if ((baseline)); then
    for mode in single quorum sentinel; do tasks+=("ORIGINAL $mode"); done
fi
for id in "${built[@]}"; do
    for mode in ${m_modes[$id]}; do tasks+=("$id $mode"); done
done
echo "mutate.sh: ${#tasks[@]} run(s), $jobs at a time, $seeds seeds per mode (quorum $qseeds)"
running=0
for t in "${tasks[@]}"; do
    if ((running >= jobs)); then
        wait -n || true
        running=$((running - 1))
    fi
    run_task $t &
    running=$((running + 1))
done
wait || true

# ---- the report ----
status=0
caught=0
total=0
slow_n=0
printf '\n%-28s %-8s %-18s %-7s %-9s %s\n' MUTANT RESULT CHECK SEED MODE "EVERY MODE"
if ((baseline)); then
    for mode in single quorum sentinel; do
        r=$(cat "$res/ORIGINAL.$mode" 2>/dev/null || echo "error no result")
        if [[ $r != missed ]]; then
            echo "ORIGINAL $mode: $r: the unchanged core fails, catches below mean nothing" >&2
            status=1
        fi
    done
fi
for id in "${ids[@]}"; do
    total=$((total + 1))
    if [[ " ${stale[*]} " == *" $id "* ]]; then
        printf '%-28s %-8s\n' "$id" STALE
        status=1
        continue
    fi
    if [[ " ${broken[*]} " == *" $id "* ]]; then
        printf '%-28s %-8s (log: build-%s.log)\n' "$id" BUILD-FAILED "$id"
        sed -n '/error/{p;q}' "$tmp/build-$id.log" | cut -c1-160
        status=1
        continue
    fi
    best= every= slow=0
    for mode in ${m_modes[$id]}; do
        r=$(cat "$res/$id.$mode" 2>/dev/null || echo "error no result")
        read -r what seed kind <<<"$r"
        case $what in
        caught)
            every+=" $mode:$seed"
            if [[ -z $best ]] || ((seed < ${best%% *})); then best="$seed $kind $mode"; fi ;;
        missed) every+=" $mode:-" ;;
        slow) every+=" $mode:SLOW"; slow=1 ;;
        *) every+=" $mode:ERROR"; echo "  $id $mode: $r" >&2; status=1 ;;
        esac
    done
    note=
    [[ " ${unchanged[*]} " == *" $id "* ]] && note=" (binary unchanged: equivalent?)"
    if [[ -n $best ]]; then
        read -r seed kind mode <<<"$best"
        caught=$((caught + 1))
        printf '%-28s %-8s %-18s %-7s %-9s%s%s\n' "$id" caught "$kind" "$seed" "$mode" "$every" "$note"
    elif ((slow)); then
        slow_n=$((slow_n + 1))
        printf '%-28s %-8s %-18s %-7s %-9s%s%s\n' "$id" SLOW - - - "$every" "$note"
    else
        printf '%-28s %-8s %-18s %-7s %-9s%s%s\n' "$id" MISSED - - - "$every" "$note"
    fi
done
echo
echo "caught $caught of $total ($slow_n slow, ${#stale[@]} stale, ${#broken[@]} not built);" \
    "$seeds seeds per mode, quorum $qseeds, from seed $first; $((SECONDS - start)) s"
exit $status
