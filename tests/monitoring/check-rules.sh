#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# check-rules.sh check|test|mutants MONITORING_DIR -- the Prometheus rules of
# packaging/monitoring with promtool (Debian package prometheus; $PROMTOOL, else
# promtool on PATH):
#   check    `promtool check rules dlock-alerts.yml`: the file and its PromQL;
#   test     `promtool test rules dlock-alerts.test.yml`: its unit tests;
#   mutants  each small change below to a copy of the rules (a threshold, a
#            `for:`, a selector) must make the unit tests fail: they see it.
# Exits 0, 1 naming what failed, or 77 (skipped) without promtool.
set -Eeuo pipefail

mode=${1:-}
dir=${2:-}
[[ $mode =~ ^(check|test|mutants)$ && -d $dir ]] || {
    echo "usage: check-rules.sh check|test|mutants MONITORING_DIR" >&2
    exit 64
}
promtool=${PROMTOOL:-promtool}
if ! command -v "$promtool" >/dev/null; then
    echo "check-rules: SKIPPED: no promtool on PATH (Debian package prometheus)"
    exit 77
fi
rules=$dir/dlock-alerts.yml
tests=$dir/dlock-alerts.test.yml

case $mode in
check)
    "$promtool" check rules "$rules"
    ;;
test)
    # promtool resolves rule_files relative to the test file.
    "$promtool" test rules "$tests"
    ;;
mutants)
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/dlock-rules.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    # One sed expression a line: a change to the rules that their tests must catch.
    mutants=(
        's/up{job="dlockd"} == 0/up == 0/'
        '/alert: DlockAgentDown/,/for:/s/for: 3m/for: 2m/'
        '/alert: DlockAgentAbsent/,/for:/s/for: 10m/for: 8m/'
        's/dlock_backend_up == 0/dlock_backend_up < 2/'
        '/alert: DlockBackendDown/,/for:/s/for: 1m/for: 0m/'
        '/alert: DlockRedisNodeDown/,/for:/s/for: 5m/for: 4m/'
        's/increase(dlock_losses_total\[5m\]) > 0/delta(dlock_losses_total[5m]) != 0/'
        's/increase(dlock_losses_total\[5m\])/increase(dlock_losses_total[10m])/'
        's/rate(dlock_doubts_total\[5m\]) \* 60 > 1/rate(dlock_doubts_total[5m]) * 60 > 0.25/'
        's/rate(dlock_doubts_total\[5m\]) \* 60 > 1/rate(dlock_doubts_total[15m]) * 60 > 1/'
        's/dlock_waiters > 100/dlock_waiters >= 100/'
        '/alert: DlockWaitersPilingUp/,/for:/s/for: 10m/for: 3m/'
        's/histogram_quantile(0.99,/histogram_quantile(0.9,/'
        's/p99_5m > 10/p99_5m > 30/'
        '/alert: DlockFdsNearLimit/,/for:/s/{job="dlockd"}//g'
        's/ > 0.8$/ > 0.9/'
        's/docs\/monitoring.md#dlockleaseslost/docs\/monitoring.md/'
    )
    cp "$tests" "$tmp/"
    failed=0
    for m in "${mutants[@]}"; do
        sed "$m" "$rules" >"$tmp/dlock-alerts.yml"
        if cmp -s "$rules" "$tmp/dlock-alerts.yml"; then
            echo "check-rules: the mutant '$m' changes nothing: the rules changed, update it" >&2
            failed=1
        elif "$promtool" test rules "$tmp/$(basename "$tests")" >"$tmp/out" 2>&1; then
            echo "check-rules: the unit tests pass with the mutant '$m'" >&2
            failed=1
        else
            echo "check-rules: caught: $m"
        fi
    done
    [ "$failed" = 0 ] || exit 1
    echo "check-rules: the unit tests catch all ${#mutants[@]} mutants"
    ;;
esac
