#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# check-install.sh BUILD_DIR SOURCE_DIR -- the install test.
#
# Installs a built tree twice into a fresh temporary directory, and checks
# what an install delivers:
#
#  1. `cmake --install BUILD --prefix STAGE`: the files and their places; the
#     shared library's SONAME, symlink chain and exported symbols; no build
#     paths in run paths; the static library; the header on its own (C and
#     C++); the man pages (no groff warnings; every exported function, error
#     code and example setting described); the example configuration,
#     accepted by the staged dlockd. Then a C program is built against STAGE
#     with pkg-config alone, and with a CMake project through
#     find_package(dlock), shared and static, and run: without an agent it
#     must get DLOCK_ECONNECT, and, when redis-server is on PATH, it takes a
#     lock through the staged dlockd (in its --dev mode), as the staged
#     dlockctl does.
#  2. `DESTDIR=PKG cmake --install BUILD --prefix /usr`, the layout of the
#     Debian package: the configuration in /etc/dlock, dlock.pc naming /usr,
#     a build with pkg-config through PKG_CONFIG_SYSROOT_DIR, the systemd
#     units checked by `systemd-analyze verify` (when it exists) with their
#     paths mapped into PKG, the units' ExecStartPre check run, and the socket
#     unit's paths equal to those of the example configuration.
#
# Exits 0 when everything holds, or 1 with a message naming the first check
# that failed. The temporary directory is removed in every case.
set -Eeuo pipefail

if [ $# -ne 2 ] || [ ! -f "$1/CMakeCache.txt" ] || [ ! -f "$2/include/dlock.h" ]; then
    echo "usage: $0 BUILD_DIR SOURCE_DIR (a configured and built tree, and its sources)" >&2
    exit 2
fi
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
cmake=${CMAKE:-cmake}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/dlock-install.XXXXXX")
agent_pid=
cleanup() {
    if [ -n "$agent_pid" ]; then
        kill -TERM "$agent_pid" 2>/dev/null || true
        wait "$agent_pid" 2>/dev/null || true
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

fail() {
    echo "check-install: FAIL: $*" >&2
    exit 1
}
trap 'fail "command failed (line $LINENO): $BASH_COMMAND"' ERR
step() { echo "check-install: $*"; }

# What the build was configured with.
cache() { sed -n "s/^$1:[A-Z]*=//p" "$build/CMakeCache.txt"; }
cc=$(cache CMAKE_C_COMPILER)
cc=${cc:-cc}
sanitize=$(cache DLOCK_SANITIZE)
# A library built with sanitizers needs programs built with them too.
san_flags=()
if [ -n "$sanitize" ]; then
    san_flags=("-fsanitize=${sanitize//;/,}")
fi

# The version, from the header.
hdr_version() { sed -n "s/^#define DLOCK_VERSION_$1 *\([0-9][0-9]*\).*/\1/p" "$src/include/dlock.h"; }
major=$(hdr_version MAJOR)
version=$major.$(hdr_version MINOR).$(hdr_version PATCH)
[[ $version =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || fail "no version in include/dlock.h"

must_file() {
    if [ ! -f "$1" ] || [ -L "$1" ]; then fail "missing file: ${1#"$tmp"/}"; fi
}
must_exec() {
    if [ ! -f "$1" ] || [ ! -x "$1" ]; then fail "missing executable: ${1#"$tmp"/}"; fi
}
must_equal() { # what, expected, actual
    [ "$2" = "$3" ] || fail "$1: expected '$2', got '$3'"
}

# ---------------------------------------------------------------------------
# The test program, for every build below.

cat >"$tmp/prog.c" <<'EOF'
/* Built against an installed libdlock. "offline SOCKET": no agent there.
 * "lock SOCKET NAME": holds NAME, sees a second client refused, releases. */
#include <dlock.h>
#include <stdio.h>
#include <string.h>

static int offline(const char *path)
{
    dlock_client *c = NULL;
    int rc = dlock_client_open(&c, path);
    printf("version %d.%d.%d\n", DLOCK_VERSION_MAJOR, DLOCK_VERSION_MINOR, DLOCK_VERSION_PATCH);
    printf("EBUSY: %s\n", dlock_strerror(DLOCK_EBUSY));
    printf("open: %s\n", rc == DLOCK_ECONNECT ? "DLOCK_ECONNECT" : dlock_strerror(rc));
    return rc == DLOCK_ECONNECT && c == NULL ? 0 : 1;
}

static int lock(const char *path, const char *name)
{
    dlock_client *c, *other;
    dlock_lease *lease, *second = NULL;
    int rc = dlock_client_open(&c, path);
    if (rc != 0) {
        printf("open: %s\n", dlock_strerror(rc));
        return 1;
    }
    dlock_acquire_options o = {.ttl_ms = 10000, .wait_ms = 5000};
    rc = dlock_lease_acquire(c, name, &o, &lease);
    if (rc != 0) {
        printf("acquire: %s\n", dlock_strerror(rc));
        dlock_client_close(c);
        return 1;
    }
    printf("held %s: valid %d, fence %s\n", dlock_lease_name(lease), dlock_lease_valid(lease),
           dlock_lease_fence(lease) > 0 ? "set" : "zero");
    rc = dlock_client_open(&other, path);
    if (rc == 0) {
        rc = dlock_lease_acquire(other, name, NULL, &second);
        dlock_client_close(other);
    }
    printf("second client: %s\n", rc == DLOCK_EBUSY ? "DLOCK_EBUSY" : dlock_strerror(rc));
    rc = dlock_lease_release(lease);
    printf("release: %s\n", dlock_strerror(rc));
    dlock_client_close(c);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "offline") == 0)
        return offline(argv[2]);
    if (argc == 4 && strcmp(argv[1], "lock") == 0)
        return lock(argv[2], argv[3]);
    fprintf(stderr, "usage: prog offline SOCKET | prog lock SOCKET NAME\n");
    return 2;
}
EOF

ebusy_text=$(sed -n 's|^ *"\([^"]*\)", */\* DLOCK_EBUSY \*/.*|\1|p' "$src/libclient/errors.c")
[ -n "$ebusy_text" ] || fail "no message for DLOCK_EBUSY in libclient/errors.c"
offline_expected="version $version
EBUSY: $ebusy_text
open: DLOCK_ECONNECT"

# run_offline WHAT PROGRAM [ENV...]: no agent at a socket path that cannot exist.
run_offline() {
    local what=$1 prog=$2 out
    shift 2
    out=$(env "$@" "$prog" offline "$tmp/no-such-dir/dlock.sock") ||
        fail "$what: the program failed: $out"
    must_equal "$what: output" "$offline_expected" "$out"
}

# ---------------------------------------------------------------------------
step "1. cmake --install --prefix STAGE"
stage=$tmp/stage
# Installed under a DESTDIR too, so that nothing can land outside $tmp: a build
# configured with an absolute directory (such as CMAKE_INSTALL_SYSCONFDIR=/etc)
# installs there whatever the prefix. The tree under the prefix then moves to
# STAGE, the place its files name.
jail=$tmp/jail
DESTDIR=$jail "$cmake" --install "$build" --prefix "$stage" >"$tmp/install.log" 2>&1 ||
    fail "cmake --install failed: $(cat "$tmp/install.log")"
[ -d "$jail$stage" ] || fail "nothing installed under the prefix"
mv "$jail$stage" "$stage"
sysconfdir=$(cache CMAKE_INSTALL_SYSCONFDIR)
if [[ $sysconfdir == /* ]]; then
    etc=$jail$sysconfdir # where that build puts the configuration
else
    etc=$stage/${sysconfdir:-etc}
fi
outside=$(find "$jail" \( -type f -o -type l \) ! -path "$etc/dlock/*" -printf '/%P\n')
[ -z "$outside" ] || fail "installed outside the prefix: $outside"

must_exec "$stage/sbin/dlockd"
must_exec "$stage/bin/dlockctl"
must_file "$stage/include/dlock.h"
cmp -s "$src/include/dlock.h" "$stage/include/dlock.h" || fail "installed dlock.h differs from include/dlock.h"

pcs=$(cd "$stage" && find . -name dlock.pc -path '*/pkgconfig/*')
[ "$(printf '%s\n' "$pcs" | grep -c .)" = 1 ] || fail "expected one pkgconfig/dlock.pc, found: ${pcs:-none}"
libdir=$stage/$(dirname "$(dirname "${pcs#./}")")
step "   library directory: ${libdir#"$stage"/}"
must_equal "Version in dlock.pc (include/dlock.h says $version)" "Version: $version" \
    "$(grep '^Version:' "$stage/${pcs#./}")"

# The shared library: real file, SONAME link, development link.
real=$libdir/libdlock.so.$version
must_file "$real"
soname=$(readelf -d "$real" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
must_equal "SONAME of libdlock.so.$version" "libdlock.so.$major" "$soname"
[ -L "$libdir/$soname" ] || fail "$soname is not a symlink"
[ -L "$libdir/libdlock.so" ] || fail "libdlock.so is not a symlink"
for link in "$soname" libdlock.so; do
    must_equal "$link resolves to" "$(readlink -f "$real")" "$(readlink -f "$libdir/$link")"
done
must_equal "libdlock.so links to" "$soname" "$(readlink "$libdir/libdlock.so")"

# Exported: exactly the functions the header marks DLOCK_EXPORT.
declared=$(grep -o '^DLOCK_EXPORT [^(]*(' "$src/include/dlock.h" |
    sed 's/.*[ *]\([A-Za-z_][A-Za-z_0-9]*\)($/\1/' | sort)
exported=$(nm -D --defined-only "$real" | awk '$2 == "T" { print $3 }' | sort)
[ -n "$declared" ] || fail "no DLOCK_EXPORT functions found in include/dlock.h"
[ "$declared" = "$exported" ] || fail "exported functions differ from the header's:
$(diff <(echo "$declared") <(echo "$exported") || true)"

# No run path into the build or source tree.
for f in "$real" "$stage/sbin/dlockd" "$stage/bin/dlockctl"; do
    rpath=$(readelf -d "$f" | sed -n 's/.*(R\(UN\)\{0,1\}PATH).*\[\(.*\)\]/\2/p')
    case "$rpath" in
    *"$build"* | *"$src"*) fail "${f#"$stage"/} has a run path into the build: $rpath" ;;
    esac
done

# The static library.
must_file "$libdir/libdlock.a"
static_syms=$(nm --defined-only "$libdir/libdlock.a" 2>/dev/null | awk '$2 == "T" { print $3 }')
grep -qx dlock_client_open <<<"$static_syms" || fail "libdlock.a does not define dlock_client_open"

# The header compiles on its own, as C99 and as C++.
echo '#include <dlock.h>' >"$tmp/hdr.c"
"$cc" -std=c99 -Wall -Wextra -Wpedantic -Werror -I"$stage/include" -c "$tmp/hdr.c" -o "$tmp/hdr.o" ||
    fail "dlock.h does not compile on its own as C99"
if command -v c++ >/dev/null; then
    cp "$tmp/hdr.c" "$tmp/hdr.cc"
    c++ -Wall -Wextra -Werror -I"$stage/include" -fsyntax-only "$tmp/hdr.cc" ||
        fail "dlock.h does not compile as C++"
else
    step "   no c++: header not compiled as C++"
fi

# CMake package files.
cmakedir=$libdir/cmake/dlock
for f in dlockConfig.cmake dlockConfigVersion.cmake dlockTargets.cmake; do
    must_file "$cmakedir/$f"
done

# systemd units, configuration, man pages.
for f in dlockd.service dlockd.socket dlockd-status.socket; do
    must_file "$stage/lib/systemd/system/$f"
    cmp -s "$src/packaging/$f" "$stage/lib/systemd/system/$f" || fail "installed $f differs"
done
conf=$etc/dlock/dlockd.conf
must_file "$conf"
cmp -s "$src/packaging/dlockd.conf" "$conf" || fail "installed dlockd.conf differs"
# The example gives the client socket to group dlock, which the package
# creates (sysusers.d); -n checks that it exists.
if ! getent group dlock >/dev/null; then
    if [ "$(id -u)" = 0 ]; then
        groupadd --system dlock
    else
        sed -i 's/^socket_group = dlock$/socket_group =/' "$conf"
    fi
fi
out=$("$stage/sbin/dlockd" -n -c "$conf" 2>&1) || fail "staged dlockd refuses its example configuration: $out"
must_equal "dlockd -n -c etc/dlock/dlockd.conf" "configuration OK" "$out"
out=$("$stage/bin/dlockctl" --version 2>&1) || fail "dlockctl --version failed: $out"
[[ $out == *" $version" ]] || fail "dlockctl --version: expected version $version, got '$out'"

for page in man8/dlockd.8 man1/dlockctl.1 man5/dlockd.conf.5 man3/libdlock.3; do
    must_file "$stage/share/man/$page"
    cmp -s "$src/packaging/${page#*/}" "$stage/share/man/$page" || fail "installed $page differs"
    if command -v groff >/dev/null; then
        warnings=$(groff -ww -man -z "$stage/share/man/$page" 2>&1)
        [ -z "$warnings" ] || fail "groff warns about $page: $warnings"
    fi
done
command -v groff >/dev/null || step "   no groff: man pages not checked for warnings"

# The pages keep up with the header and the example configuration: every
# exported function and error code in libdlock(3), every setting of
# dlockd.conf in dlockd.conf(5).
page3=$stage/share/man/man3/libdlock.3
for f in $declared; do
    grep -q "^\.BI \"[^\"]*[ *]$f(" "$page3" || fail "libdlock.3 does not show $f() in its SYNOPSIS"
done
codes=$(awk '$1 == "#define" && $2 ~ /^DLOCK_E[A-Z]+$/ && $2 != "DLOCK_EXPORT" { print $2 }' \
    "$src/include/dlock.h")
for code in $codes; do
    grep -qx "\.B $code" "$page3" || fail "libdlock.3 does not describe $code"
done
keys=$(sed -n 's/^\([a-z_][a-z_]*\) *=.*/\1/p' "$conf")
[ -n "$keys" ] || fail "no settings found in dlockd.conf"
for key in $keys; do
    grep -qE "^(\.BI $key |\\\\fB$key\\\\fR)" "$stage/share/man/man5/dlockd.conf.5" ||
        fail "dlockd.conf.5 does not describe the setting $key"
done

# --- a program built with pkg-config alone
step "   build with pkg-config"
export PKG_CONFIG_PATH=$libdir/pkgconfig
must_equal "pkg-config finds" "$libdir/pkgconfig" "$(pkg-config --variable=pcfiledir dlock)"
must_equal "pkg-config prefix" "$stage" "$(pkg-config --variable=prefix dlock)"
must_equal "pkg-config --modversion" "$version" "$(pkg-config --modversion dlock)"
# shellcheck disable=SC2046 # pkg-config output is split into words on purpose
"$cc" "${san_flags[@]}" -std=c11 -Wall -Wextra -Werror -o "$tmp/prog-pc" "$tmp/prog.c" \
    $(pkg-config --cflags --libs dlock) || fail "build with pkg-config failed"
# shellcheck disable=SC2046
deps=$("$cc" $(pkg-config --cflags dlock) -M "$tmp/prog.c" |
    awk '{ for (i = 1; i <= NF; i++) if ($i ~ /\/dlock\.h$/) print $i }')
must_equal "the header used" "$stage/include/dlock.h" "$deps"
needed=$(readelf -d "$tmp/prog-pc" | sed -n 's/.*(NEEDED).*\[\(libdlock[^]]*\)\]/\1/p')
must_equal "the program needs" "$soname" "$needed"
loaded=$(LD_LIBRARY_PATH=$libdir ldd "$tmp/prog-pc" | awk '$1 == "'"$soname"'" { print $3 }')
must_equal "$soname is loaded from" "$libdir/$soname" "$loaded"
run_offline "pkg-config build" "$tmp/prog-pc" LD_LIBRARY_PATH="$libdir"
unset PKG_CONFIG_PATH

# --- a CMake project with find_package(dlock)
step "   build with find_package(dlock)"
mkdir "$tmp/consumer"
cp "$tmp/prog.c" "$tmp/consumer/prog.c"
cat >"$tmp/consumer/CMakeLists.txt" <<EOF
cmake_minimum_required(VERSION 3.16)
project(dlock_consumer C)
# The version file refuses another major version.
find_package(dlock $((major + 1)).0 QUIET)
if(dlock_FOUND)
  message(FATAL_ERROR "find_package(dlock $((major + 1)).0) accepted dlock \${dlock_VERSION}")
endif()
find_package(dlock $version EXACT REQUIRED)
message(STATUS "dlock \${dlock_VERSION} from \${dlock_DIR}")
add_executable(prog prog.c)
target_link_libraries(prog PRIVATE dlock::dlock)
add_executable(prog_static prog.c)
target_link_libraries(prog_static PRIVATE dlock::dlock_static)
EOF
"$cmake" -S "$tmp/consumer" -B "$tmp/consumer/build" -DCMAKE_PREFIX_PATH="$stage" \
    -DCMAKE_C_COMPILER="$cc" -DCMAKE_C_FLAGS="${san_flags[*]}" >"$tmp/consumer.log" 2>&1 ||
    fail "configuring the CMake project failed: $(cat "$tmp/consumer.log")"
grep -q "^-- dlock $version from $cmakedir\$" "$tmp/consumer.log" ||
    fail "find_package(dlock) did not find the staged package: $(grep '^-- dlock' "$tmp/consumer.log" || true)"
"$cmake" --build "$tmp/consumer/build" >>"$tmp/consumer.log" 2>&1 ||
    fail "building the CMake project failed: $(cat "$tmp/consumer.log")"
# The imported target carries the library's place: no LD_LIBRARY_PATH.
run_offline "find_package build, shared" "$tmp/consumer/build/prog"
run_offline "find_package build, static" "$tmp/consumer/build/prog_static"
needed=$(readelf -d "$tmp/consumer/build/prog_static" | sed -n 's/.*(NEEDED).*\[\(libdlock[^]]*\)\]/\1/p')
must_equal "the static build needs" "" "$needed"

# --- the staged agent, library and dlockctl together
if command -v redis-server >/dev/null; then
    step "   lock through the staged dlockd --dev"
    sock=$tmp/agent.sock
    # Its private directory goes into $tmp. The timeout only bounds an agent
    # left behind; --foreground makes it signal the agent alone (which stops
    # its own redis-server), and pass our SIGTERM on once.
    TMPDIR=$tmp timeout --foreground 60 "$stage/sbin/dlockd" --dev -s "$sock" >"$tmp/agent.out" 2>"$tmp/agent.err" &
    agent_pid=$!
    for _ in $(seq 100); do
        [ -S "$sock" ] && break
        kill -0 "$agent_pid" 2>/dev/null || fail "staged dlockd --dev exited: $(cat "$tmp/agent.err")"
        sleep 0.1
    done
    [ -S "$sock" ] || fail "staged dlockd --dev did not listen within 10 s: $(cat "$tmp/agent.err")"
    out=$(LD_LIBRARY_PATH=$libdir "$tmp/prog-pc" lock "$sock" install-check) ||
        fail "locking through the staged agent failed: $out"
    must_equal "lock through the staged agent" "held install-check: valid 1, fence set
second client: DLOCK_EBUSY
release: success" "$out"
    # shellcheck disable=SC2016 # expanded by the command's shell
    out=$(timeout 20 "$stage/bin/dlockctl" -s "$sock" run -n install-check -- \
        sh -c 'echo "$DLOCK_NAME ${DLOCK_FENCE:+fence}"') || fail "staged dlockctl run failed: $out"
    must_equal "staged dlockctl run" "install-check fence" "$out"
    kill -TERM "$agent_pid"
    wait "$agent_pid" || fail "staged dlockd did not exit 0 on SIGTERM: $(cat "$tmp/agent.err")"
    agent_pid=
else
    step "   no redis-server on PATH: the staged agent is not run"
fi

# ---------------------------------------------------------------------------
step "2. DESTDIR=PKG cmake --install --prefix /usr (the package layout)"
pkg=$tmp/pkg
DESTDIR=$pkg "$cmake" --install "$build" --prefix /usr >"$tmp/install-pkg.log" 2>&1 ||
    fail "DESTDIR install failed: $(cat "$tmp/install-pkg.log")"
must_file "$pkg/etc/dlock/dlockd.conf"
[ ! -e "$pkg/usr/etc" ] || fail "the prefix /usr installs usr/etc; the configuration belongs in /etc"
pkgpcs=$(cd "$pkg" && find . -name dlock.pc -path '*/pkgconfig/*')
[ "$(printf '%s\n' "$pkgpcs" | grep -c .)" = 1 ] || fail "expected one dlock.pc under PKG, found: ${pkgpcs:-none}"
pkgpc=$pkg/${pkgpcs#./}
must_equal "dlock.pc prefix" "prefix=/usr" "$(grep '^prefix=' "$pkgpc")"
must_exec "$pkg/usr/sbin/dlockd"

step "   build with pkg-config in a sysroot"
# shellcheck disable=SC2046
"$cc" "${san_flags[@]}" -std=c11 -Wall -Wextra -Werror -o "$tmp/prog-sysroot" "$tmp/prog.c" \
    $(PKG_CONFIG_SYSROOT_DIR=$pkg PKG_CONFIG_PATH=$(dirname "$pkgpc") pkg-config --cflags --libs dlock) ||
    fail "build with pkg-config in the sysroot failed"
run_offline "sysroot build" "$tmp/prog-sysroot" LD_LIBRARY_PATH="$(dirname "$(dirname "$pkgpc")")"

# The units, with every absolute path of their Exec lines moved into PKG.
units=$(dirname "$(find "$pkg" -name dlockd.service | head -n 1)")
[ -f "$units/dlockd.service" ] || fail "no dlockd.service under PKG"
mkdir "$tmp/units"
for f in dlockd.service dlockd.socket dlockd-status.socket; do
    # Only what the package installs moves into the staging tree; system
    # commands stay where they are.
    sed -E "/^Exec/ s#(/usr/sbin/dlockd|/usr/bin/dlockctl|/etc/dlock/)#$pkg\1#g" "$units/$f" \
        >"$tmp/units/$f"
done
pre=$(sed -n 's/^ExecStartPre=//p' "$tmp/units/dlockd.service")
[ -n "$pre" ] || fail "dlockd.service has no ExecStartPre"
# shellcheck disable=SC2086 # the unit's command line, split as systemd does for plain words
out=$($pre 2>&1) || fail "the unit's ExecStartPre fails under PKG: $pre: $out"
must_equal "ExecStartPre" "configuration OK" "$out"

# The socket units listen where the configuration says the agent does,
# with the group it gives its client socket to.
pkgconf=$pkg/etc/dlock/dlockd.conf
must_equal "dlockd.socket ListenStream= vs dlockd.conf socket" \
    "$(sed -n 's/^socket *= *//p' "$pkgconf")" "$(sed -n 's/^ListenStream=//p' "$units/dlockd.socket")"
must_equal "dlockd-status.socket ListenStream= vs dlockd.conf status_socket" \
    "$(sed -n 's/^status_socket *= *//p' "$pkgconf")" \
    "$(sed -n 's/^ListenStream=//p' "$units/dlockd-status.socket")"
must_equal "dlockd.service ExecReload= -S vs dlockd.conf status_socket" \
    "$(sed -n 's/^status_socket *= *//p' "$pkgconf")" \
    "$(sed -n 's/^ExecReload=.* -S \([^ ]*\) reload$/\1/p' "$units/dlockd.service")"
must_equal "dlockd.socket SocketGroup= vs dlockd.conf socket_group" \
    "$(sed -n 's/^socket_group *= *//p' "$pkgconf")" "$(sed -n 's/^SocketGroup=//p' "$units/dlockd.socket")"

if command -v systemd-analyze >/dev/null; then
    step "   systemd-analyze verify"
    # Man pages are not installed system-wide, so Documentation= is not
    # followed. Warnings about the units themselves fail the test too.
    if ! out=$(systemd-analyze verify --man=no "$tmp/units/dlockd.service" "$tmp/units/dlockd.socket" \
        "$tmp/units/dlockd-status.socket" 2>&1); then
        fail "systemd-analyze verify: $out"
    fi
    ours=$(grep -E 'dlockd\.(service|socket)' <<<"$out" || true)
    [ -z "$ours" ] || fail "systemd-analyze verify: $ours"
    [ -z "$out" ] || step "   systemd-analyze verify (not about our units): $out"
else
    step "   no systemd-analyze: the units are not verified"
fi

step "OK: dlock $version installs and works from its install"
