#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""check-manpages.py SOURCE_DIR -- a man page for every function of libdlock.

Every function that include/dlock.h declares (DLOCK_EXPORT) has a page
packaging/man3/NAME.3: either the page of its group, or a page that only
includes it (".so man3/GROUP.3", as libsystemd's pages do). The page of a
group names the function in its NAME section and shows its prototype in its
SYNOPSIS exactly as the header declares it (white space aside); it has the
sections NAME, SYNOPSIS, DESCRIPTION, RETURN VALUE and SEE ALSO, includes
<dlock.h>, and groff and man(1) render it without a warning. No page there
is left over from a function the header no longer has, and libdlock(3)
points to every group's page. man(1) finds every name in a copy of the pages
laid out as installed.

Exits 0 when everything holds, or 1 listing what does not.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

SECTIONS = ("NAME", "SYNOPSIS", "DESCRIPTION", "RETURN VALUE", "SEE ALSO")
SO_LINE = re.compile(r"^\.so man3/([A-Za-z0-9_]+)\.3$")


def declared(header):
    """The functions of the header: {name: prototype without DLOCK_EXPORT}."""
    with open(header, encoding="utf-8") as f:
        text = f.read()
    out = {}
    for m in re.finditer(r"^DLOCK_EXPORT\s+([^;{]*?\b(dlock_\w+)\s*\([^;]*\)\s*;)", text, re.M):
        out[m.group(2)] = " ".join(m.group(1).split())
    return out


def render(path, cwd, width="250n"):
    """groff's text of a page (no warnings wanted: -ww), and its warnings."""
    r = subprocess.run(["groff", "-man", "-ww", "-Tascii", "-P-cbou", f"-rLL={width}", path],
                       cwd=cwd, capture_output=True, text=True, check=False)
    return r.stdout, (r.stderr.strip() or ("groff exit %d" % r.returncode if r.returncode else ""))


def section(text, name):
    """The body of a section of rendered text, its lines joined by spaces."""
    lines = text.splitlines()
    body, inside = [], False
    for line in lines:
        if line and not line[0].isspace():
            inside = line.strip() == name
            continue
        if inside:
            body.append(line.strip())
    return " ".join(" ".join(body).split())


def main():
    if len(sys.argv) != 2:
        print("usage: check-manpages.py SOURCE_DIR", file=sys.stderr)
        return 2
    src = os.path.abspath(sys.argv[1])
    mandir = os.path.join(src, "packaging", "man3")
    functions = declared(os.path.join(src, "include", "dlock.h"))
    problems = []
    if len(functions) < 30:
        problems.append("only %d functions found in dlock.h" % len(functions))

    pages = sorted(f[:-2] for f in os.listdir(mandir) if f.endswith(".3"))
    # Each page: its group's page (itself, or what it includes).
    group = {}
    for page in pages:
        with open(os.path.join(mandir, page + ".3"), encoding="utf-8") as f:
            first = f.readline().rstrip("\n")
        m = SO_LINE.match(first)
        group[page] = m.group(1) if m else page
    for page in pages:
        if page not in functions and page != "dlock":
            problems.append("man3/%s.3: no such function in dlock.h" % page)
    for name in functions:
        if name not in group:
            problems.append("%s: no page man3/%s.3" % (name, name))

    groups = sorted(set(group[p] for p in pages if p != "dlock"))
    rendered = {}
    for g in groups:
        path = os.path.join(mandir, g + ".3")
        if not os.path.exists(path):
            problems.append("man3/%s.3 is included (.so) but does not exist" % g)
            continue
        if group.get(g) != g:
            problems.append("man3/%s.3 is included but only includes another page" % g)
            continue
        text, warnings = render(path, mandir)
        if warnings:
            problems.append("groff -man -ww on man3/%s.3: %s" % (g, warnings))
        rendered[g] = text
        with open(path, encoding="utf-8") as f:
            source = f.read()
        for s in SECTIONS:
            if not re.search(r'^\.SH "?%s"?$' % s, source, re.M):
                problems.append("man3/%s.3 has no %s section" % (g, s))
        if "#include <dlock.h>" not in section(text, "SYNOPSIS"):
            problems.append("man3/%s.3: its SYNOPSIS does not include <dlock.h>" % g)

    for name, proto in functions.items():
        g = group.get(name)
        if g not in rendered:
            continue
        names = [n.strip() for n in section(rendered[g], "NAME").split(" - ")[0].split(",")]
        if name not in names:
            problems.append("man3/%s.3: %s is not in its NAME section (%s)" % (g, name, names))
        if proto not in section(rendered[g], "SYNOPSIS"):
            problems.append("man3/%s.3: its SYNOPSIS lacks the prototype of dlock.h: %s" % (g, proto))

    # libdlock(3) points to every group's page.
    with open(os.path.join(src, "packaging", "libdlock.3"), encoding="utf-8") as f:
        overview = f.read()
    for g in groups:
        if g != "libdlock" and not re.search(r"^\.BR %s \(3\)" % re.escape(g), overview, re.M):
            problems.append("libdlock.3 does not point to %s(3)" % g)

    # man(1) finds every name, as installed, and renders it without a warning.
    if shutil.which("man"):
        with tempfile.TemporaryDirectory() as tmp:
            os.mkdir(os.path.join(tmp, "man3"))
            for page in pages:
                shutil.copy(os.path.join(mandir, page + ".3"), os.path.join(tmp, "man3"))
            shutil.copy(os.path.join(src, "packaging", "libdlock.3"), os.path.join(tmp, "man3"))
            env = dict(os.environ, MANWIDTH="80", MANPAGER="cat", PAGER="cat")
            for page in pages:
                r = subprocess.run(["man", "--warnings", "-M", tmp, "3", page], env=env,
                                   capture_output=True, text=True, check=False)
                if r.returncode != 0 or r.stderr.strip() or "NAME" not in r.stdout:
                    problems.append("man 3 %s: exit %d: %s" % (page, r.returncode, r.stderr.strip()))
    else:
        print("check-manpages: no man(1): the pages are not looked up by name")

    if problems:
        print("check-manpages: FAIL", file=sys.stderr)
        for p in problems:
            print("  " + p, file=sys.stderr)
        return 1
    print("check-manpages: %d functions, %d pages (%d groups), every prototype shown"
          % (len(functions), len(pages), len(groups)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
