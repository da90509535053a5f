#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# check-spdx.sh SOURCE_DIR -- every source, build, script, unit, man page and
# configuration file of the project carries an SPDX license identifier in
# its first lines. Exits 0, or 1 listing the files without one.
set -euo pipefail
cd "$1"
missing=$(find agent libclient include tools tests packaging bench .ci CMakeLists.txt -type f \
    \( -name '*.[ch]' -o -name '*.sh' -o -name '*.cmake' -o -name '*.in' -o -name 'CMakeLists.txt' \
    -o -name '*.service' -o -name '*.socket' -o -name '*.conf' -o -name '*.[1-8]' \
    -o -name '*.sysusers' -o -name '*.bash-completion' -o -name '*.postinst' -o -name '*.prerm' \
    -o -name '*.postrm' -o -name run -o -name run-tests -o -name demo.sh -o -name '*.java' \
    -o -name pom.xml \) -print |
    while read -r f; do
        head -n 3 "$f" | grep -q 'SPDX-License-Identifier: BSD-3-Clause' || echo "$f"
    done)
if [ -n "$missing" ]; then
    echo "check-spdx: no SPDX-License-Identifier in:" >&2
    echo "$missing" >&2
    exit 1
fi
echo "check-spdx: every file carries its SPDX license identifier"
