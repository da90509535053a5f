#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Renders a Grafana dashboard's panels as one static HTML page, for the eyes.

Each panel's exprs run over a time range through the Prometheus HTTP API
(/api/v1/query_range; /api/v1/query for stat and table panels), and each
panel becomes an inline SVG line chart (title, axes, legend), a number, or a
table, laid out on the dashboard's 24-column grid. No Grafana is needed; a
browser, or headless Chromium, shows the page:

  tools/render-dashboard.py packaging/monitoring/dlock-dashboard.json \\
      http://127.0.0.1:9090 --minutes 10 -o /tmp/dashboard.html
  chromium --headless --screenshot=/tmp/dashboard.png --window-size=1600,2400 \\
      /tmp/dashboard.html

Variables: Grafana's $__rate_interval and $__interval are worked out from the
step and --scrape-interval; every other variable is the regular expression
.* (all its values) unless set with --var NAME=VALUE. Python standard
library only."""
import argparse
import html
import json
import math
import re
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

COLORS = ["#7eb26d", "#eab839", "#6ed0e0", "#ef843c", "#e24d42", "#1f78c1", "#ba43a9",
          "#705da0", "#508642", "#cca300", "#447ebc", "#c15c17", "#890f02", "#0a437c"]
COL_PX = 64  # one of the 24 columns
ROW_PX = 30  # one grid row


def query(base, path, params, timeout=20):
    url = base.rstrip("/") + path + "?" + urllib.parse.urlencode(params)
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            answer = json.load(r)
    except urllib.error.HTTPError as e:
        try:
            answer = json.load(e)
        except ValueError:
            raise RuntimeError(f"HTTP {e.code}") from None
    except (urllib.error.URLError, OSError, ValueError) as e:
        raise RuntimeError(str(e)) from None
    if answer.get("status") != "success":
        raise RuntimeError(answer.get("error", "query failed"))
    return answer["data"]["result"]


def substitute(expr, variables):
    def sub(m):
        name = m.group(0).strip("${}").split(":")[0]
        return variables.get(name, ".*")
    return re.sub(r"\$\{[^}]*\}|\$[A-Za-z_][A-Za-z0-9_]*", sub, expr)


def legend(fmt, labels):
    if fmt:
        return re.sub(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}", lambda m: labels.get(m.group(1), ""), fmt).strip()
    inner = ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items()) if k != "__name__")
    return labels.get("__name__", "") + ("{" + inner + "}" if inner else "") or "value"


def fmt_value(v, unit):
    """A value in the panel's unit, short."""
    if v is None or math.isnan(v):
        return "–"
    if math.isinf(v):
        return "∞" if v > 0 else "-∞"
    a = abs(v)
    if unit == "s":
        for div, suffix in ((86400, " d"), (3600, " h"), (60, " min"), (1, " s"), (1e-3, " ms"), (1e-6, " µs")):
            if a >= div or div == 1e-6:
                return f"{v / div:.3g}{suffix}" if a else "0 s"
    if unit == "bytes":
        for div, suffix in ((2**30, " GiB"), (2**20, " MiB"), (2**10, " KiB"), (1, " B")):
            if a >= div or div == 1:
                return f"{v / div:.3g}{suffix}"
    if unit == "percentunit":
        return f"{v * 100:.3g}%"
    suffix = {"reqps": "/s", "opm": "/min"}.get(unit, "")
    for div, s in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if a >= div:
            return f"{v / div:.3g}{s}{suffix}"
    return f"{v:.3g}{suffix}"


def nice_ticks(lo, hi, n=5):
    if hi <= lo:
        hi = lo + 1
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.floor(lo / step) * step
    ticks, t = [], start
    while t <= hi + step * 0.5:
        ticks.append(round(t, 12))
        t += step
    return ticks


def svg_chart(series, unit, width, height, start, end, bars=False):
    """series: [(name, [(t, v)...])]. An SVG with axes and one polyline each."""
    left, right, top, bottom = 64, 12, 8, 22
    pw, ph = width - left - right, height - top - bottom
    values = [v for _, pts in series for _, v in pts if v is not None and math.isfinite(v)]
    lo = min(values + [0]) if values else 0
    hi = max(values) if values else 1
    if hi == lo:
        hi = lo + (abs(lo) or 1)
    ticks = nice_ticks(lo, hi)
    lo, hi = min(lo, ticks[0]), max(hi, ticks[-1])

    def X(t):
        return left + (t - start) / (end - start) * pw

    def Y(v):
        return top + ph - (v - lo) / (hi - lo) * ph

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="10">']
    for t in ticks:
        y = Y(t)
        out.append(f'<line x1="{left}" x2="{left + pw}" y1="{y:.1f}" y2="{y:.1f}" stroke="#333" />')
        out.append(f'<text x="{left - 4}" y="{y + 3:.1f}" fill="#aaa" text-anchor="end">{html.escape(fmt_value(t, unit))}</text>')
    span = end - start
    xstep = next(s for s in (1, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 86400)
                 if span / s <= max(2, pw // 90))
    t = math.ceil(start / xstep) * xstep
    while t <= end:
        x = X(t)
        label = time.strftime("%H:%M:%S" if xstep < 60 else "%H:%M", time.gmtime(t))
        out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top}" y2="{top + ph}" stroke="#2a2a2a" />')
        out.append(f'<text x="{x:.1f}" y="{height - 6}" fill="#aaa" text-anchor="middle">{label}</text>')
        t += xstep
    out.append(f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#555" />')
    for i, (_, pts) in enumerate(series):
        color = COLORS[i % len(COLORS)]
        if bars:
            w = max(1.0, pw / max(1, (end - start) / max(1e-9, _step_of(pts))) * 0.8)
            for t, v in pts:
                if v is not None and math.isfinite(v) and v != 0:
                    y0, y1 = Y(max(lo, 0)), Y(v)
                    out.append(f'<rect x="{X(t) - w / 2:.1f}" y="{min(y0, y1):.1f}" width="{w:.1f}" '
                               f'height="{abs(y0 - y1):.1f}" fill="{color}" opacity="0.8" />')
            continue
        run = []
        for t, v in pts + [(None, None)]:
            if t is not None and v is not None and math.isfinite(v):
                run.append(f"{X(t):.1f},{Y(v):.1f}")
                continue
            if len(run) == 1:
                x, y = run[0].split(",")
                out.append(f'<circle cx="{x}" cy="{y}" r="1.5" fill="{color}" />')
            elif run:
                out.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.5" points="{" ".join(run)}" />')
            run = []
    if not values:
        out.append(f'<text x="{left + pw / 2}" y="{top + ph / 2}" fill="#888" text-anchor="middle" '
                   f'font-size="13">No data</text>')
    out.append("</svg>")
    return "".join(out)


def _step_of(pts):
    return pts[1][0] - pts[0][0] if len(pts) > 1 else 1


def render_panel(p, args, variables, start, end, step):
    g = p.get("gridPos", {})
    title = html.escape(p.get("title", ""))
    style = (f'grid-column: {g.get("x", 0) + 1} / span {g.get("w", 24)}; '
             f'grid-row: {g.get("y", 0) + 1} / span {g.get("h", 1)};')
    if p.get("type") == "row":
        return f'<div class="row" style="{style}">{title}</div>'
    unit = p.get("fieldConfig", {}).get("defaults", {}).get("unit", "none")
    width = g.get("w", 24) * COL_PX - 12
    height = g.get("h", 8) * ROW_PX - 34
    body, errors = "", []
    targets = [t for t in p.get("targets", []) if t.get("expr") and not t.get("hide")]
    if p.get("type") in ("stat", "table"):
        rows = []
        for t in targets:
            try:
                res = query(args.prometheus, "/api/v1/query",
                            {"query": substitute(t["expr"], variables), "time": end})
            except RuntimeError as e:
                errors.append(f'{t.get("refId")}: {e}')
                continue
            for r in res:
                rows.append((t, r["metric"], float(r["value"][1])))
        if p["type"] == "stat":
            mappings = {}
            for m in p.get("fieldConfig", {}).get("defaults", {}).get("mappings", []):
                mappings.update(m.get("options", {}))
            cells = []
            for t, labels, v in rows:
                m = mappings.get(f"{v:g}")
                text = m["text"] if m else fmt_value(v, unit)
                color = m.get("color", "#ccc") if m else "#ccc"
                name = legend(t.get("legendFormat"), labels)
                cells.append(f'<div class="stat"><span style="color:{color}">{html.escape(text)}</span>'
                             f'<small>{html.escape(name)}</small></div>')
            body = "".join(cells) or '<div class="nodata">No data</div>'
        else:
            hidden = {"__name__", "job"}
            for tr in p.get("transformations", []):
                hidden |= {k for k, v in tr.get("options", {}).get("excludeByName", {}).items() if v}
            # Overrides by field name: its display name and unit.
            names, units = {}, {}
            for o in p.get("fieldConfig", {}).get("overrides", []):
                if o.get("matcher", {}).get("id") == "byName":
                    field = o["matcher"].get("options")
                    for prop in o.get("properties", []):
                        if prop.get("id") == "displayName":
                            names[field] = prop.get("value")
                        elif prop.get("id") == "unit":
                            units[field] = prop.get("value")
            merged = {}
            for t, labels, v in rows:
                key = labels.get("instance", "")
                merged.setdefault(key, {}).update({k: x for k, x in labels.items() if k not in hidden})
                field = f'Value #{t.get("refId")}'
                if field not in hidden:
                    merged[key][names.get(field, field)] = fmt_value(v, units.get(field, unit))
            cols = sorted({k for r in merged.values() for k in r})
            body = ("<table><tr>" + "".join(f"<th>{html.escape(c)}</th>" for c in cols) + "</tr>"
                    + "".join("<tr>" + "".join(f"<td>{html.escape(str(r.get(c, '')))}</td>" for c in cols)
                              + "</tr>" for r in merged.values()) + "</table>") if merged else \
                '<div class="nodata">No data</div>'
    else:
        series = []
        for t in targets:
            try:
                res = query(args.prometheus, "/api/v1/query_range",
                            {"query": substitute(t["expr"], variables), "start": start, "end": end,
                             "step": step})
            except RuntimeError as e:
                errors.append(f'{t.get("refId")}: {e}')
                continue
            for r in res:
                pts = [(float(ts), float(v)) for ts, v in r["values"]]
                series.append((legend(t.get("legendFormat"), r["metric"]), pts))
        bars = p.get("fieldConfig", {}).get("defaults", {}).get("custom", {}).get("drawStyle") == "bars"
        body = svg_chart(series, unit, width, height - 18 * math.ceil(len(series) / 3), start, end, bars)
        items = []
        for i, (name, pts) in enumerate(series):
            last = next((v for _, v in reversed(pts) if math.isfinite(v)), None)
            items.append(f'<span><i style="background:{COLORS[i % len(COLORS)]}"></i>{html.escape(name)} '
                         f'<b>{html.escape(fmt_value(last, unit))}</b></span>')
        body += '<div class="legend">' + "".join(items) + "</div>"
    err = "".join(f'<div class="err">{html.escape(e)}</div>' for e in errors)
    return (f'<div class="panel" style="{style}"><div class="title">{title}</div>{err}{body}</div>')


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dashboard")
    ap.add_argument("prometheus", help="base URL, e.g. http://127.0.0.1:9090")
    ap.add_argument("--minutes", type=float, default=15, help="time range up to now (default 15)")
    ap.add_argument("--end", type=float, help="end of the range, Unix time (default now)")
    ap.add_argument("--scrape-interval", type=float, default=15, help="seconds (default 15)")
    ap.add_argument("--var", action="append", default=[], metavar="NAME=VALUE")
    ap.add_argument("-o", "--output", default="-", help="HTML file (default stdout)")
    args = ap.parse_args()
    dash = json.load(open(args.dashboard, encoding="utf-8"))
    end = args.end or time.time()
    start = end - args.minutes * 60
    step = max(1.0, round((end - start) / 300))
    rate = max(step + args.scrape_interval, 4 * args.scrape_interval)
    variables = {"__rate_interval": f"{int(math.ceil(rate))}s", "__interval": f"{int(step)}s",
                 "__range": f"{int(end - start)}s"}
    for v in args.var:
        name, _, value = v.partition("=")
        variables[name] = value
    panels = []
    for p in dash.get("panels", []):
        panels.append(p)
        panels += p.get("panels", []) if p.get("collapsed") else []
    cells = [render_panel(p, args, variables, start, end, step) for p in panels]
    rows = max((p.get("gridPos", {}).get("y", 0) + p.get("gridPos", {}).get("h", 1) for p in panels), default=1)
    page = f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>{html.escape(dash.get("title", "dashboard"))}</title>
<style>
body {{ background: #111217; color: #ccccdc; font-family: sans-serif; margin: 12px; }}
h1 {{ font-size: 18px; margin: 0 0 8px; }} .sub {{ color: #888; font-size: 12px; margin-bottom: 8px; }}
.grid {{ display: grid; grid-template-columns: repeat(24, {COL_PX - 4}px); grid-template-rows: repeat({rows}, {ROW_PX - 4}px); gap: 4px; }}
.panel {{ background: #181b1f; border: 1px solid #2c3235; border-radius: 2px; overflow: hidden; padding: 4px; }}
.title {{ font-size: 13px; font-weight: bold; margin: 0 0 4px 2px; }}
.row {{ font-size: 15px; font-weight: bold; align-self: end; border-bottom: 1px solid #333; }}
.legend {{ font-size: 10px; line-height: 16px; }} .legend span {{ margin-right: 10px; white-space: nowrap; }}
.legend i {{ display: inline-block; width: 10px; height: 3px; margin-right: 4px; vertical-align: middle; }}
.stat {{ display: inline-block; margin: 6px 12px; text-align: center; }}
.stat span {{ font-size: 28px; font-weight: bold; display: block; }} .stat small {{ color: #888; }}
.nodata {{ color: #888; text-align: center; margin-top: 20px; }} .err {{ color: #e24d42; font-size: 11px; }}
table {{ font-size: 11px; border-collapse: collapse; }} td, th {{ border-bottom: 1px solid #333; padding: 2px 8px; text-align: left; }}
</style></head><body>
<h1>{html.escape(dash.get("title", ""))}</h1>
<div class="sub">{time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(start))} to {time.strftime("%H:%M:%S", time.gmtime(end))} UTC,
step {int(step)}s, $__rate_interval {variables["__rate_interval"]}, from {html.escape(args.prometheus)}</div>
<div class="grid">
{chr(10).join(cells)}
</div></body></html>
"""
    if args.output == "-":
        sys.stdout.write(page)
    else:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(page)
    return 0


if __name__ == "__main__":
    sys.exit(main())
