#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Checks the Grafana dashboard and the Prometheus rules of packaging/monitoring.

The dashboard (JSON):
 1. it parses, and has the top-level keys Grafana needs to import it, a
    datasource variable DS_PROMETHEUS and the variable instance over
    label_values(dlock_build_info, instance);
 2. panel ids are unique; every gridPos lies in Grafana's 24 columns and no
    two panels overlap;
 3. every panel and target uses the datasource ${DS_PROMETHEUS}; every panel
    but a row has targets, each with a refId and an expr; every $variable
    of an expr is defined (or one of Grafana's own);
 4. every expr is valid PromQL: each, with the variables replaced, becomes a
    recording rule of a throwaway file that `promtool check rules` checks.
The dashboard and the rules (YAML, read line by line: one `expr:` a line):
 5. every metric name in an expr is in the list of names (metric-names.txt:
    NAME TYPE [LABEL...]) or recorded by the rules, with _bucket, _sum,
    _count for a histogram; every label of a selector, of by (...) and of a
    legend is one of the expr's metrics (or instance, job; le for a bucket);
 6. every alert has a runbook annotation `docs/monitoring.md#ANCHOR` whose
    heading exists, and unit tests that fire it and that must not.
With --metrics FILE (the text of a live agent's /metrics, or names one a
line), also: every name the dashboard, the rules and the list use is served.

Usage: check-dashboard.py [--metrics FILE] [--no-promtool] MONITORING_DIR DOCS_MD
       check-dashboard.py --self-test MONITORING_DIR DOCS_MD
                          (each check finds what it must, in broken copies)
Exits 0, 1 listing the errors, 77 (skipped) without promtool, 64 on a usage
error. promtool is $PROMTOOL, else promtool on PATH (Debian package prometheus)."""
import copy
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

COLUMNS = 24
DS_UID = "${DS_PROMETHEUS}"
# Labels Prometheus adds to every scraped series.
TARGET_LABELS = {"instance", "job"}
# Grafana's own variables, and what stands in for each in promtool's check.
GRAFANA_VARS = {"__rate_interval": "5m", "__interval": "1m", "__range": "1h",
                "__interval_ms": "60000", "__range_s": "3600", "__range_ms": "3600000"}
GROUPING = {"by", "without", "on", "ignoring", "group_left", "group_right"}
KEYWORDS = GROUPING | {"and", "or", "unless", "bool", "offset", "inf", "nan"}
TOKEN = re.compile(r"""
    (?P<space>\s+) | (?P<comment>\#[^\n]*)
  | (?P<str>"(?:[^"\\]|\\.)*" | '(?:[^'\\]|\\.)*' | `[^`]*`)
  | (?P<var>\$\{[^}]*\} | \$[A-Za-z_][A-Za-z0-9_]*)
  | (?P<num>[0-9][0-9A-Za-z_.]* | \.[0-9][0-9A-Za-z_.]*)
  | (?P<id>[A-Za-z_:][A-Za-z0-9_:]*)
  | (?P<op>=~|!~|!=|==|>=|<=|[-+*/%^=<>,(){}\[\]@])
""", re.X)


class Names:
    """The list of metric names: NAME TYPE [LABEL...] a line, # comments."""

    def __init__(self, path):
        self.types, self.labels, self.optional = {}, {}, set()
        for n, line in enumerate(open(path, encoding="utf-8"), 1):
            words = line.split("#", 1)[0].split()
            if not words:
                continue
            if len(words) < 2 or words[1].rstrip("?") not in ("counter", "gauge", "histogram", "scrape"):
                raise SystemExit(f"{path}:{n}: want NAME counter|gauge|histogram|scrape[?] [LABEL...]")
            self.types[words[0]] = words[1].rstrip("?")
            if words[1].endswith("?"):
                self.optional.add(words[0])
            self.labels[words[0]] = set(words[2:])
        self.recorded = {}

    def resolve(self, name):
        """(the listed name, the labels a selector of it may use), or None."""
        if name in self.types:
            return name, self.labels[name] | TARGET_LABELS
        if name in self.recorded:
            return name, self.recorded[name] | TARGET_LABELS
        for suffix in ("_bucket", "_sum", "_count"):
            base = name[:-len(suffix)]
            if name.endswith(suffix) and self.types.get(base) == "histogram":
                extra = {"le"} if suffix == "_bucket" else set()
                return base, self.labels[base] | TARGET_LABELS | extra
        return None


def tokens(expr):
    pos, out = 0, []
    while pos < len(expr):
        m = TOKEN.match(expr, pos)
        if not m:
            raise ValueError(f"cannot read {expr[pos:pos + 20]!r}")
        pos = m.end()
        if m.lastgroup not in ("space", "comment"):
            out.append((m.lastgroup, m.group()))
    return out


def scan(expr):
    """The selectors [(metric, [label...])], the labels of by (...) and the
    like, and the $variables of a PromQL expression."""
    toks = tokens(expr)
    selectors, grouping, variables = [], [], []
    i = 0
    while i < len(toks):
        kind, text = toks[i]
        nxt = toks[i + 1][1] if i + 1 < len(toks) else None
        if kind == "var":
            variables.append(text.strip("${}").split(":")[0])
        elif kind == "id" and text in GROUPING and nxt == "(":
            i += 2
            while i < len(toks) and toks[i][1] != ")":
                if toks[i][0] == "id":
                    grouping.append(toks[i][1])
                i += 1
        elif kind == "id" and nxt in ("(", "by", "without"):
            pass  # a function, or an aggregation (sum by (...) (...))
        elif kind == "id" and text.lower() not in KEYWORDS:
            labels = []
            if nxt == "{":
                i += 2
                while i < len(toks) and toks[i][1] != "}":
                    if toks[i][0] == "id":
                        labels.append(toks[i][1])
                    elif toks[i][0] == "var":
                        variables.append(toks[i][1].strip("${}").split(":")[0])
                    i += 1
            selectors.append((text, labels))
        elif text == "{":
            selectors.append((None, []))  # a selector without a metric name
        elif text == "[":
            while i < len(toks) and toks[i][1] != "]":
                if toks[i][0] == "var":
                    variables.append(toks[i][1].strip("${}").split(":")[0])
                i += 1
        i += 1
    # Variables inside strings ("$instance" of a matcher) count too.
    for kind, text in toks:
        if kind == "str":
            variables += [v.strip("${}").split(":")[0]
                          for v in re.findall(r"\$\{[^}]*\}|\$[A-Za-z_][A-Za-z0-9_]*", text)]
    return selectors, grouping, variables


def check_expr(where, expr, names, errors, legend=None, defined=()):
    """Names and labels of one expression (5), its variables (3)."""
    try:
        selectors, grouping, variables = scan(expr)
    except ValueError as e:
        errors.append(f"{where}: {e}")
        return
    if not selectors:
        errors.append(f"{where}: no metric in {expr!r}")
    allowed = set(TARGET_LABELS)
    for metric, labels in selectors:
        if metric is None:
            errors.append(f"{where}: a selector without a metric name in {expr!r}")
            continue
        found = names.resolve(metric)
        if not found:
            errors.append(f"{where}: unknown metric {metric} (not in the list of names)")
            continue
        allowed |= found[1]
        for label in labels:
            if label not in found[1]:
                errors.append(f"{where}: {metric} has no label {label}")
    for label in grouping:
        if label not in allowed:
            errors.append(f"{where}: by/on label {label} is a label of none of the expr's metrics")
    for label in re.findall(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}", legend or ""):
        if label not in allowed:
            errors.append(f"{where}: the legend names {label}, a label of none of the expr's metrics")
    for v in variables:
        if v not in GRAFANA_VARS and v not in defined:
            errors.append(f"{where}: undefined variable ${v}")


def for_promtool(expr):
    """The expression with Grafana's variables replaced: durations for its
    own, and a regular expression for ours (used in matchers only)."""
    def sub(m):
        v = m.group(0).strip("${}").split(":")[0]
        return GRAFANA_VARS.get(v, ".*")
    return re.sub(r"\$\{[^}]*\}|\$[A-Za-z_][A-Za-z0-9_]*", sub, expr)


def promtool_check(exprs, promtool, errors):
    """(4) Every expr as a recording rule of a throwaway file."""
    with tempfile.TemporaryDirectory(prefix="dlock-dash.") as tmp:
        path = os.path.join(tmp, "exprs.yml")
        with open(path, "w", encoding="utf-8") as f:
            f.write("groups:\n  - name: dashboard\n    rules:\n")
            for n, (where, expr) in enumerate(exprs):
                f.write(f"      - record: dashboard_expr_{n}\n        expr: {json.dumps(for_promtool(expr))}\n")
        r = subprocess.run([promtool, "check", "rules", path], capture_output=True, text=True)
        if r.returncode != 0:
            out = (r.stdout + r.stderr).replace(path, "exprs.yml")
            # Name the panel of each rule promtool cites (its number in the group).
            for n, (where, expr) in enumerate(exprs):
                out = re.sub(rf"\bdashboard_expr_{n}\b", f"{where}: {expr}", out)
            errors.append("promtool check rules on the dashboard's exprs failed:\n" + out.strip())


def panels_of(dash):
    for p in dash.get("panels", []):
        yield p
        for q in p.get("panels", []) or []:  # the panels of a collapsed row
            yield q


def check_dashboard(dash, names, errors):
    """(1)-(3) and (5) of the dashboard; returns [(where, expr)] for (4)."""
    exprs = []
    for key in ("title", "uid", "schemaVersion", "panels", "templating", "time", "editable"):
        if key not in dash:
            errors.append(f"dashboard: no top-level key {key}")
    if not isinstance(dash.get("schemaVersion"), int) or dash.get("schemaVersion", 0) < 36:
        errors.append("dashboard: schemaVersion is not a number from 36 on")
    variables = {v.get("name"): v for v in dash.get("templating", {}).get("list", [])}
    if variables.get("DS_PROMETHEUS", {}).get("type") != "datasource" or \
            variables["DS_PROMETHEUS"].get("query") != "prometheus":
        errors.append("dashboard: no datasource variable DS_PROMETHEUS of type prometheus")
    inst = variables.get("instance", {})
    query = inst.get("query")
    query = query.get("query") if isinstance(query, dict) else query
    if query != "label_values(dlock_build_info, instance)":
        errors.append("dashboard: the variable instance is not label_values(dlock_build_info, instance)")
    for name, v in variables.items():
        if v.get("type") == "query":
            q = v.get("query")
            q = q.get("query") if isinstance(q, dict) else q
            m = re.fullmatch(r"label_values\(\s*(.*?)\s*,\s*(\w+)\s*\)", q or "")
            if not m:
                errors.append(f"variable {name}: not a label_values(METRIC, LABEL) query: {q!r}")
            else:
                check_expr(f"variable {name}", m.group(1), names, errors, "{{%s}}" % m.group(2))
            if (v.get("datasource") or {}).get("uid") != DS_UID:
                errors.append(f"variable {name}: its datasource is not {DS_UID}")
    ids, cells = {}, {}
    for p in panels_of(dash):
        pid = p.get("id")
        where = f"panel {pid} ({p.get('title', '?')})"
        if not isinstance(pid, int):
            errors.append(f"{where}: no numeric id")
        elif pid in ids:
            errors.append(f"{where}: id {pid} also of panel {ids[pid]!r}")
        else:
            ids[pid] = p.get("title")
        if not p.get("title"):
            errors.append(f"{where}: no title")
        g = p.get("gridPos") or {}
        if not all(isinstance(g.get(k), int) for k in "xywh"):
            errors.append(f"{where}: gridPos needs integers x, y, w, h")
        elif g["x"] < 0 or g["y"] < 0 or g["w"] < 1 or g["h"] < 1 or g["x"] + g["w"] > COLUMNS:
            errors.append(f"{where}: gridPos {g} is not within {COLUMNS} columns")
        elif p in dash.get("panels", []):  # a collapsed row's panels lie elsewhere
            for x in range(g["x"], g["x"] + g["w"]):
                for y in range(g["y"], g["y"] + g["h"]):
                    if (x, y) in cells:
                        errors.append(f"{where}: overlaps panel {cells[(x, y)]} at x={x} y={y}")
                        break
                    cells[(x, y)] = pid
                else:
                    continue
                break
        if p.get("type") == "row":
            continue
        if (p.get("datasource") or {}).get("uid") != DS_UID:
            errors.append(f"{where}: its datasource is not {DS_UID}")
        targets = p.get("targets") or []
        if not targets:
            errors.append(f"{where}: no targets")
        refs = set()
        for t in targets:
            ref = t.get("refId")
            tw = f"{where} target {ref}"
            if not ref or ref in refs:
                errors.append(f"{tw}: no refId, or one used twice")
            refs.add(ref)
            if (t.get("datasource") or {}).get("uid") not in (None, DS_UID):
                errors.append(f"{tw}: its datasource is not {DS_UID}")
            expr = t.get("expr")
            if not isinstance(expr, str) or not expr.strip():
                errors.append(f"{tw}: no expr")
                continue
            check_expr(tw, expr, names, errors, t.get("legendFormat"), variables)
            exprs.append((tw, expr))
    return exprs


def read_rules(path):
    """[(line, key, value)] of the keys of a rules or tests file that matter
    here (a value on the same line, quotes removed)."""
    out = []
    for n, line in enumerate(open(path, encoding="utf-8"), 1):
        m = re.match(r"^\s*(?:-\s+)?(record|alert|expr|runbook|alertname|exp_alerts)\s*:\s*(.*?)\s*$", line)
        if m:
            value = m.group(2)
            if value[:1] in "|>" and value:
                raise SystemExit(f"{path}:{n}: write each {m.group(1)} on one line (no block scalar)")
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
                value = value[1:-1]
            out.append((n, m.group(1), value))
    return out


def slugs(doc):
    """GitHub's anchors of the headings of a markdown file."""
    out = set()
    for line in open(doc, encoding="utf-8"):
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            s = re.sub(r"[^\w\- ]", "", m.group(1).lower())
            out.add(s.replace(" ", "-"))
    return out


def check_rules(rules_path, tests_path, doc, names, errors):
    """(5) and (6) of the rules; returns [(where, expr)]."""
    entries = read_rules(rules_path)
    base = os.path.basename(rules_path)
    for n, key, value in entries:
        if key == "record":
            names.recorded[value] = set()
    alerts, exprs, current = {}, [], None
    anchors = slugs(doc)
    for n, key, value in entries:
        where = f"{base}:{n}"
        if key in ("alert", "record"):
            current = value
            if key == "alert":
                alerts[value] = where
        elif key == "expr":
            check_expr(f"{where} ({current})", value, names, errors)
            exprs.append((f"{where} ({current})", value))
        elif key == "runbook":
            alerts[current] = None
            m = re.fullmatch(r"docs/monitoring\.md#([\w-]+)", value)
            if not m or m.group(1) not in anchors:
                errors.append(f"{where} ({current}): runbook {value!r} names no heading of {doc}")
    for alert, where in alerts.items():
        if where:
            errors.append(f"{where}: alert {alert} has no runbook annotation")
    if not alerts or not exprs:
        errors.append(f"{base}: no alert or no expr found: is it still one expr a line?")
    fires, quiet, current = set(), set(), None
    for n, key, value in read_rules(tests_path):
        if key == "alertname":
            current = value
        elif key == "exp_alerts":
            (quiet if value == "[]" else fires).add(current)
    for alert in alerts:
        if alert not in fires:
            errors.append(f"{os.path.basename(tests_path)}: no test fires {alert}")
        if alert not in quiet:
            errors.append(f"{os.path.basename(tests_path)}: no test where {alert} must not fire")
    return exprs


def scraped_names(path):
    """The metric names of a /metrics text (or of a list of names)."""
    out = set()
    for line in open(path, encoding="utf-8"):
        m = re.match(r"^#\s+TYPE\s+(\S+)", line) or re.match(r"^([A-Za-z_:][A-Za-z0-9_:]*)", line)
        if m:
            out.add(m.group(1))
    return out


def check_scraped(path, names, used, errors):
    served = scraped_names(path)
    missing = set()
    for name in set(used) | (set(names.types) - names.optional):
        listed = names.resolve(name)
        if not listed or names.types.get(listed[0]) in (None, "scrape"):
            continue  # recorded by the rules, or written by Prometheus
        if names.types[listed[0]] == "histogram" and name == listed[0]:
            name += "_bucket"
        if name not in served and listed[0] not in served:
            missing.add(name)
    for name in sorted(missing):
        errors.append(f"{path}: the agent does not serve {name}")


def run(mondir, doc, promtool, metrics=None, dash=None):
    errors = []
    names = Names(os.path.join(mondir, "metric-names.txt"))
    rules = os.path.join(mondir, "dlock-alerts.yml")
    exprs = check_rules(rules, os.path.join(mondir, "dlock-alerts.test.yml"), doc, names, errors)
    if dash is None:
        try:
            dash = json.load(open(os.path.join(mondir, "dlock-dashboard.json"), encoding="utf-8"))
        except ValueError as e:
            return [f"dlock-dashboard.json does not parse: {e}"]
    dash_exprs = check_dashboard(dash, names, errors)
    if promtool:
        promtool_check(dash_exprs, promtool, errors)
    if metrics:
        used = [m for _, e in exprs + dash_exprs for m, _ in scan(e)[0] if m]
        check_scraped(metrics, names, used, errors)
    return errors


def self_test(mondir, doc, promtool):
    """Each check must find what it is there for, in a broken copy."""
    good = json.load(open(os.path.join(mondir, "dlock-dashboard.json"), encoding="utf-8"))
    plain = [p for p in good["panels"] if p.get("type") != "row"]

    def first_target(d):
        return [p for p in d["panels"] if p.get("type") != "row"][0]["targets"][0]

    cases = []

    def case(name, want, change):
        d = copy.deepcopy(good)
        change(d)
        cases.append((name, want, d))

    case("a duplicate id", "id %d also" % plain[0]["id"],
         lambda d: d["panels"][2].update(id=plain[0]["id"]))
    case("overlapping panels", "overlaps panel",
         lambda d: [p for p in d["panels"] if p.get("type") != "row"][1]["gridPos"].update(
             x=plain[0]["gridPos"]["x"], y=plain[0]["gridPos"]["y"]))
    case("a panel past column 24", "not within 24 columns",
         lambda d: [p for p in d["panels"] if p.get("type") != "row"][0]["gridPos"].update(x=22))
    case("a target without expr", "no expr", lambda d: first_target(d).pop("expr"))
    case("a renamed metric", "unknown metric dlock_leases_held",
         lambda d: d["panels"].append(dict(copy.deepcopy(plain[-1]), id=999, gridPos={"x": 0, "y": 999, "w": 6, "h": 2},
                                           targets=[{"refId": "A", "expr": "sum(dlock_leases_held)",
                                                     "datasource": {"uid": DS_UID}}])))
    case("an unknown label", "dlock_node_up has no label nodes",
         lambda d: first_target(d).update(expr='dlock_node_up{nodes="x"}'))
    case("a by label of no metric", "by/on label outcome",
         lambda d: first_target(d).update(expr="sum by (outcome) (dlock_leases)"))
    case("a legend label of no metric", "the legend names kind",
         lambda d: first_target(d).update(expr="dlock_leases", legendFormat="{{kind}}"))
    case("an undefined variable", "undefined variable $host",
         lambda d: first_target(d).update(expr='dlock_leases{instance=~"$host"}'))
    case("a fixed datasource", "its datasource is not",
         lambda d: [p for p in d["panels"] if p.get("type") != "row"][0].update(datasource={"uid": "P1809F7CD0C75ACF3"}))
    case("no instance variable", "the variable instance",
         lambda d: d["templating"]["list"].pop(1))
    case("no schemaVersion", "no top-level key schemaVersion", lambda d: d.pop("schemaVersion"))
    if promtool:
        case("bad PromQL", "promtool check rules on the dashboard's exprs failed",
             lambda d: first_target(d).update(expr="sum(rate(dlock_grants_total[5m])"))
    failed = []
    errors = run(mondir, doc, promtool, dash=good)
    if errors:
        failed.append("the dashboard as it is: " + "; ".join(errors))
    for name, want, d in cases:
        errors = run(mondir, doc, promtool, dash=d)
        if not any(want in e for e in errors):
            failed.append(f"{name}: no error with {want!r}, got {errors}")
    # The rules: a renamed metric, a runbook to no heading, an alert without tests.
    with tempfile.TemporaryDirectory(prefix="dlock-mon.") as tmp:
        rule_cases = [
            ("a renamed metric in a rule", "unknown metric dlock_lost_total",
             ("dlock-alerts.yml", "increase(dlock_losses_total[5m])", "increase(dlock_lost_total[5m])")),
            ("a runbook to no heading", "names no heading",
             ("dlock-alerts.yml", "monitoring.md#dlockleaseslost", "monitoring.md#leases-lost")),
            ("an alert without tests", "no test fires DlockWaitersPilingUp",
             ("dlock-alerts.test.yml", "alertname: DlockWaitersPilingUp", "alertname: DlockWaiters")),
            ("a metric left out of the list", "unknown metric dlock_waiters",
             ("metric-names.txt", "\ndlock_waiters gauge\n", "\n")),
        ]
        for name, want, (f, old, new) in rule_cases:
            for g in ("metric-names.txt", "dlock-alerts.yml", "dlock-alerts.test.yml", "dlock-dashboard.json"):
                shutil.copy(os.path.join(mondir, g), tmp)
            text = open(os.path.join(tmp, f), encoding="utf-8").read()
            if old not in text:
                failed.append(f"{name}: {old!r} is not in {f} any more: update the self-test")
                continue
            open(os.path.join(tmp, f), "w", encoding="utf-8").write(text.replace(old, new))
            errors = run(tmp, doc, None)
            if not any(want in e for e in errors):
                failed.append(f"{name}: no error with {want!r}, got {errors}")
        # --metrics: a scrape without dlock_waiters is missing it.
        scrape = os.path.join(tmp, "scrape.txt")
        listed = Names(os.path.join(mondir, "metric-names.txt"))
        with open(scrape, "w", encoding="utf-8") as f:
            for n, t in listed.types.items():
                if n != "dlock_waiters" and t != "scrape":
                    sample = n + '_bucket{le="+Inf"}' if t == "histogram" else n
                    f.write(f"# TYPE {n} {t}\n{sample} 0\n")
        errors = run(mondir, doc, None, metrics=scrape)
        if [e for e in errors if "dlock_waiters" not in e] or not any("does not serve dlock_waiters" in e for e in errors):
            failed.append(f"--metrics: want exactly the missing dlock_waiters, got {errors}")
    for f in failed:
        print("self-test FAILED:", f, file=sys.stderr)
    print(f"self-test: {len(cases) + len(rule_cases) + 1} broken copies," + (" promtool included" if promtool else " without promtool"),
          "ok" if not failed else "FAILED")
    return 1 if failed else 0


def main(argv):
    args, metrics, use_promtool, selftest = [], None, True, False
    it = iter(argv)
    for a in it:
        if a == "--metrics":
            metrics = next(it, None)
        elif a == "--no-promtool":
            use_promtool = False
        elif a == "--self-test":
            selftest = True
        elif a.startswith("-"):
            args = None
            break
        else:
            args.append(a)
    if not args or len(args) != 2 or (metrics is None and "--metrics" in argv):
        print(__doc__.split("Usage:")[1].split("Exits")[0].strip(), file=sys.stderr)
        return 64
    promtool = None
    if use_promtool:
        promtool = shutil.which(os.environ.get("PROMTOOL", "promtool"))
        if not promtool:
            print("check-dashboard: SKIPPED: no promtool on PATH (Debian package prometheus)")
            return 77
    if selftest:
        return self_test(args[0], args[1], promtool)
    errors = run(args[0], args[1], promtool, metrics)
    for e in errors:
        print("check-dashboard:", e, file=sys.stderr)
    if errors:
        return 1
    print("check-dashboard: the dashboard and the rules are well formed"
          + (", their PromQL checked by promtool" if promtool else "")
          + (f", every metric served in {metrics}" if metrics else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
