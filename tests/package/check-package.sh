#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# check-package.sh BUILD_DIR SOURCE_DIR -- the Debian package test.
#
# Makes the Debian packages of a built tree with `cpack -G DEB` in a fresh
# temporary directory, and checks them:
#
#  1. Exactly four packages, dlockd, libdlock0, libdlock-dev and
#     python3-dlock, named PKG_VERSION_ARCH.deb (ARCH all for python3-dlock).
#  2. lintian: no error, and no warning the package does not override; every
#     override shipped in /usr/share/lintian/overrides/PKG has a comment line
#     (the reason) before it, and is used.
#  3. The control fields and files: version, architecture, section, priority,
#     maintainer, dependencies (dpkg-shlibdeps' libc6; libdlock-dev on
#     libdlock0 of the same version; python3-dlock on python3 and libdlock0
#     of this version or later), libdlock0's shlibs and ldconfig trigger
#     (and no maintainer script calling ldconfig), dlockd's conffile, and
#     maintainer scripts that `sh -n` accepts.
#  4. The files: which package has what (the library in the multiarch
#     directory, its SONAME link alone in libdlock0), executables and the
#     shared library stripped, man pages compressed with gzip -9n, the
#     machine-readable copyright and changelog.gz of each package; the
#     documents where the man pages say they are (the operator's in dlockd,
#     the developer's in libdlock-dev), and every /usr/share/doc path that an
#     installed man page or the configuration names in one of the packages;
#     a man page in libdlock-dev for every function of dlock.h, each of
#     which man(1) renders without a warning; in a
#     hardened build, hardening-check passes on the programs and the library; the
#     Python modules in /usr/lib/python3/dist-packages/dlock.
#  5. dpkg installs the packages into a throwaway root directory (as an
#     unprivileged user under fakeroot, the maintainer scripts run without
#     chroot under DPKG_ROOT): the user and group dlock exist there, the
#     configuration is root:dlock 0640, the units are enabled, the installed
#     programs run and the installed Python module imports and loads the
#     installed library; installing again (as an upgrade does) keeps an
#     administrator's mode of the configuration; removing keeps the
#     configuration, purging removes it and the units' enablement.
#
# Exits 0 when everything holds, 77 (skipped) when lintian is not installed,
# or 1 with a message naming the first check that failed. The temporary
# directory is removed in every case.
set -Eeuo pipefail

if [ $# -ne 2 ] || [ ! -f "$1/CPackConfig.cmake" ] || [ ! -f "$2/include/dlock.h" ]; then
    echo "usage: $0 BUILD_DIR SOURCE_DIR (a configured and built tree, and its sources)" >&2
    exit 2
fi
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
cpack=${CPACK:-cpack}

if ! command -v lintian >/dev/null; then
    echo "check-package: SKIP: lintian is not installed"
    exit 77
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/dlock-package.XXXXXX")
cleanup() { rm -rf "$tmp"; }
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

fail() {
    echo "check-package: FAIL: $*" >&2
    exit 1
}
trap 'fail "command failed (line $LINENO): $BASH_COMMAND"' ERR
step() { echo "check-package: $*"; }
must_equal() { # what, expected, actual
    [ "$2" = "$3" ] || fail "$1: expected '$2', got '$3'"
}
need() { # command, the Debian package that has it
    command -v "$1" >/dev/null || fail "$1 is not installed (Debian package $2)"
}
need dpkg-deb dpkg
need dpkg-architecture dpkg-dev
need file file
need fakeroot fakeroot

hdr_version() { sed -n "s/^#define DLOCK_VERSION_$1 *\([0-9][0-9]*\).*/\1/p" "$src/include/dlock.h"; }
version=$(hdr_version MAJOR).$(hdr_version MINOR).$(hdr_version PATCH)
arch=$(dpkg --print-architecture)
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
libdir=usr/lib/$multiarch
pkgs="dlockd libdlock0 libdlock-dev python3-dlock"
arch_of() { if [ "$1" = python3-dlock ]; then echo all; else echo "$arch"; fi; }
units=$(find "$src/packaging" -maxdepth 1 \( -name '*.service' -o -name '*.socket' \) -printf '%f\n')
# The man pages of libdlock-dev: libdlock(3), and those of its functions.
man3=$(printf '%s\n' libdlock.3 $(cd "$src/packaging/man3" && ls -- *.3) | sort)

# ---------------------------------------------------------------------------
step "1. cpack -G DEB"
debdir=$tmp/debs
"$cpack" -G DEB --config "$build/CPackConfig.cmake" -B "$debdir" >"$tmp/cpack.log" 2>&1 ||
    fail "cpack failed: $(cat "$tmp/cpack.log")"
made=$(find "$debdir" -maxdepth 1 -name '*.deb' -printf '%f\n' | sort | paste -sd ' ')
expected=$(for p in $pkgs; do echo "${p}_${version}_$(arch_of "$p").deb"; done | sort | paste -sd ' ')
must_equal "the packages cpack made" "$expected" "$made"
deb() { echo "$debdir/${1}_${version}_$(arch_of "$1").deb"; }
field() { dpkg-deb -f "$(deb "$1")" "$2"; }

# Each package unpacked, with its control files, for the checks below.
mkdir "$tmp/x" "$tmp/c"
for p in $pkgs; do
    dpkg-deb -x "$(deb "$p")" "$tmp/x/$p"
    dpkg-deb -e "$(deb "$p")" "$tmp/c/$p"
done

# ---------------------------------------------------------------------------
step "2. lintian"
debs=()
for p in $pkgs; do debs+=("$(deb "$p")"); done
# Info tags too, for unused-override; overridden tags are listed (O:).
if ! lintian --fail-on error,warning --display-info --show-overrides --tag-display-limit 0 \
    "${debs[@]}" >"$tmp/lintian.log" 2>&1; then
    fail "lintian: $(grep -E '^[EW]: ' "$tmp/lintian.log" || cat "$tmp/lintian.log")"
fi
unused=$(grep -E '^I: .* unused-override' "$tmp/lintian.log" || true)
[ -z "$unused" ] || fail "lintian overrides that match nothing: $unused"
for p in $pkgs; do
    ov=$tmp/x/$p/usr/share/lintian/overrides/$p
    [ -f "$ov" ] || continue
    # Every override follows a comment (its reason), a blank line or none.
    bare=$(awk '/^#/ { reason = 1; next } /^[ \t]*$/ { reason = 0; next }
                { if (!reason) print; reason = 0 }' "$ov")
    [ -z "$bare" ] || fail "lintian overrides of $p without a reason comment: $bare"
done
overridden=$(grep -c '^O: ' "$tmp/lintian.log" || true)
step "   lintian: no errors or warnings; $overridden overridden"

# ---------------------------------------------------------------------------
step "3. control fields and files"
for p in $pkgs; do
    must_equal "$p: Version" "$version" "$(field "$p" Version)"
    must_equal "$p: Architecture" "$(arch_of "$p")" "$(field "$p" Architecture)"
    must_equal "$p: Priority" optional "$(field "$p" Priority)"
    must_equal "$p: Source" dlock "$(field "$p" Source)"
    [[ "$(field "$p" Maintainer)" =~ ^[^\<]+\ \<[^@\>]+@[^\>]+\>$ ]] ||
        fail "$p: Maintainer is not 'Name <address>': $(field "$p" Maintainer)"
done
must_equal "dlockd: Section" admin "$(field dlockd Section)"
must_equal "libdlock0: Section" libs "$(field libdlock0 Section)"
must_equal "libdlock-dev: Section" libdevel "$(field libdlock-dev Section)"
must_equal "python3-dlock: Section" python "$(field python3-dlock Section)"

# Dependencies: from dpkg-shlibdeps for what has ELF objects.
for p in dlockd libdlock0; do
    [[ ", $(field "$p" Depends), " == *", libc6 (>= "* ]] ||
        fail "$p: Depends has no libc6 (>= ...) from dpkg-shlibdeps: $(field "$p" Depends)"
done
for lib in libhiredis libev libinih libsystemd; do
    [[ "$(field dlockd Depends)" == *"$lib"* ]] || fail "dlockd: Depends lacks $lib: $(field dlockd Depends)"
done
must_equal "libdlock-dev: Depends" "libdlock0 (= $version)" "$(field libdlock-dev Depends)"
must_equal "python3-dlock: Depends" "python3:any, libdlock0 (>= $version)" \
    "$(field python3-dlock Depends)"

# libdlock0: shlibs, the ldconfig trigger, and no script of its own.
must_equal "libdlock0: shlibs" "libdlock 0 libdlock0 (>= $version)" "$(cat "$tmp/c/libdlock0/shlibs")"
must_equal "libdlock0: triggers" "activate-noawait ldconfig" "$(cat "$tmp/c/libdlock0/triggers")"
scripts=$(find "$tmp/c" -regex '.*/\(preinst\|postinst\|prerm\|postrm\)' -printf '%P\n' | sort |
    paste -sd ' ')
must_equal "maintainer scripts" "dlockd/postinst dlockd/postrm dlockd/prerm" "$scripts"
for s in $scripts; do
    sh -n "$tmp/c/$s" || fail "$s: sh -n finds a syntax error"
    must_equal "$s: mode" 755 "$(stat -c %a "$tmp/c/$s")"
    ! grep -q ldconfig "$tmp/c/$s" || fail "$s calls ldconfig (the trigger does)"
done
must_equal "dlockd: conffiles" /etc/dlock/dlockd.conf "$(cat "$tmp/c/dlockd/conffiles")"

# ---------------------------------------------------------------------------
step "4. files"
# Which package has what: the files and links of each, sorted, without the
# documents checked below (dlockTargets-CONFIG.cmake: per build type).
listing() {
    dpkg-deb -c "$(deb "$1")" | awk '$1 !~ /^d/ { print $6 }' | sed 's|^\./|/|' |
        grep -Ev '^/usr/share/(doc|lintian)/' | sed 's/dlockTargets-[a-z]*\.cmake$/dlockTargets-CONFIG.cmake/' |
        sort
}
expect() { printf '%s\n' "$@" | sort; }
must_equal "libdlock0 files" "$(expect "/$libdir/libdlock.so.$(hdr_version MAJOR)" \
    "/$libdir/libdlock.so.$version")" "$(listing libdlock0)"
must_equal "libdlock-dev files" "$(expect /usr/include/dlock.h "/$libdir/libdlock.a" \
    "/$libdir/libdlock.so" "/$libdir/pkgconfig/dlock.pc" "/$libdir/cmake/dlock/dlockConfig.cmake" \
    "/$libdir/cmake/dlock/dlockConfigVersion.cmake" "/$libdir/cmake/dlock/dlockTargets.cmake" \
    "/$libdir/cmake/dlock/dlockTargets-CONFIG.cmake" \
    $(printf '/usr/share/man/man3/%s.gz\n' $man3))" "$(listing libdlock-dev)"
pymods=$(cd "$src/bindings/python/src" && find dlock \( -name '*.py' -o -name py.typed \) \
    -printf '/usr/lib/python3/dist-packages/%p\n')
# shellcheck disable=SC2086 # one file per word
must_equal "python3-dlock files" "$(expect $pymods)" "$(listing python3-dlock)"
completion=
if [ -f "$src/packaging/dlockctl.bash-completion" ]; then
    completion=/usr/share/bash-completion/completions/dlockctl
fi
# shellcheck disable=SC2086 # the lists split into words on purpose
unit_files=$(printf '/lib/systemd/system/%s\n' $units)
# shellcheck disable=SC2086
must_equal "dlockd files" "$(expect /etc/dlock/dlockd.conf $unit_files /usr/bin/dlockctl \
    /usr/lib/sysusers.d/dlock.conf /usr/lib/tmpfiles.d/dlock.conf /usr/sbin/dlockd $completion \
    /usr/share/man/man1/dlockctl.1.gz /usr/share/man/man5/dlockd.conf.5.gz \
    /usr/share/man/man8/dlockd.8.gz)" "$(listing dlockd)"

# Nothing `cmake --install` installs is left out of the packages (as an
# install rule without a component would be): man pages there are
# compressed, and the documents move to the package's own directory.
DESTDIR=$tmp/plain "${CMAKE:-cmake}" --install "$build" --prefix /usr >"$tmp/install.log" 2>&1 ||
    fail "cmake --install failed: $(cat "$tmp/install.log")"
packaged=$(for p in $pkgs; do listing "$p"; done | sort)
left_out=$(find "$tmp/plain" ! -type d -printf '/%P\n' | grep -Ev '^/usr/share/doc/dlockd?/' |
    sed -e 's|^\(/usr/share/man/.*\)$|\1.gz|' -e 's/dlockTargets-[a-z]*\.cmake$/dlockTargets-CONFIG.cmake/' |
    sort | comm -23 - <(echo "$packaged"))
[ -z "$left_out" ] || fail "installed by cmake --install but in no package: $left_out"

# Modes and owners: root:root, 0644 files and 0755 directories and programs,
# the configuration 0644 until postinst restricts it.
odd=$(for p in $pkgs; do dpkg-deb -c "$(deb "$p")"; done |
    awk '$2 != "root/root" || ($1 !~ /^(-rw-r--r--|-rwxr-xr-x|drwxr-xr-x|lrwxrwxrwx)$/)')
[ -z "$odd" ] || fail "unusual owners or modes: $odd"
progs=$(for p in $pkgs; do dpkg-deb -c "$(deb "$p")"; done | awk '$1 ~ /^-..x/ { print $6 }' |
    sort | paste -sd ' ')
must_equal "executable files" "./usr/bin/dlockctl ./usr/sbin/dlockd" "$progs"

for f in dlockd/usr/sbin/dlockd dlockd/usr/bin/dlockctl "libdlock0/$libdir/libdlock.so.$version"; do
    info=$(file -b "$tmp/x/$f")
    [[ $info == ELF*", stripped"* ]] || fail "$f is not stripped: $info"
done

# Hardening (a build with DLOCK_HARDENING, which sanitizer and Debug builds
# leave out): PIE, the stack protector, _FORTIFY_SOURCE, RELRO and BIND_NOW,
# by hardening-check. Not control flow protection, which no binary linked on
# Debian 12 carries (its C start-up objects lack the marking).
if [ "${DLOCK_HARDENED:-0}" != 1 ]; then
    step "   not a hardened build: the binaries' hardening is not checked"
elif ! command -v hardening-check >/dev/null; then
    fail "hardening-check is not installed (Debian package devscripts)"
else
    for f in dlockd/usr/sbin/dlockd dlockd/usr/bin/dlockctl "libdlock0/$libdir/libdlock.so.$version"; do
        out=$(hardening-check --nocfprotection "$tmp/x/$f" 2>&1) || fail "hardening-check $f: $out"
        step "   $(tr '\n' ' ' <<<"$out" | sed "s|$tmp/x/||; s/  */ /g")"
    done
fi

# Man pages: gzip -9n of the sources (no name, no time stamp).
for page in dlockd/usr/share/man/man8/dlockd.8 dlockd/usr/share/man/man1/dlockctl.1 \
    dlockd/usr/share/man/man5/dlockd.conf.5 $(printf 'libdlock-dev/usr/share/man/man3/%s\n' $man3); do
    source=$src/packaging/${page##*/}
    [ -f "$source" ] || source=$src/packaging/man3/${page##*/}
    gzip -9n <"$source" | cmp -s - "$tmp/x/$page.gz" ||
        fail "$page.gz is not the gzip -9n of ${source#"$src/"}"
done

# A page for every function of the header, which man(1) finds by the
# function's name and renders (a .so page with the page it includes) without
# a warning, and groff without a warning either.
man3dir=$tmp/x/libdlock-dev/usr/share/man
functions=$(sed -n 's/^DLOCK_EXPORT .*[ *]\(dlock_[a-z0-9_]*\)(.*/\1/p' "$src/include/dlock.h")
[ "$(wc -w <<<"$functions")" -ge 30 ] || fail "too few functions found in dlock.h: $functions"
for f in $functions libdlock dlock; do
    [ -f "$man3dir/man3/$f.3.gz" ] || fail "libdlock-dev has no man page for $f (man3/$f.3.gz)"
    out=$(MANWIDTH=80 man --warnings -M "$man3dir" 3 "$f" 2>&1 >"$tmp/page.txt") ||
        fail "man 3 $f failed: $out"
    [ -z "$out" ] || fail "man 3 $f warns: $out"
    grep -q "^NAME" "$tmp/page.txt" || fail "man 3 $f shows no NAME section"
    # A .so page: the page it includes (compressed, as soelim cannot read it).
    page=$man3dir/man3/$f.3.gz
    so=$(gzip -dc "$page" | sed -n '1s/^\.so \(man3\/[^ ]*\.3\)$/\1/p')
    if [ -n "$so" ]; then
        page=$man3dir/$so.gz
        [ -f "$page" ] || fail "man3/$f.3.gz includes $so, which is not in libdlock-dev"
    fi
    out=$(gzip -dc "$page" | groff -man -ww -z 2>&1)
    [ -z "$out" ] || fail "groff warns about ${page#"$man3dir/"}: $out"
done
step "   a man page for each of the $(wc -w <<<"$functions") functions of dlock.h"

for p in $pkgs; do
    doc=$tmp/x/$p/usr/share/doc/$p
    copyright=$doc/copyright
    [ -f "$copyright" ] || fail "$p has no /usr/share/doc/$p/copyright"
    must_equal "$p: copyright Format" \
        "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/" \
        "$(head -n 1 "$copyright")"
    grep -qx 'License: BSD-3-Clause' "$copyright" || fail "$p: copyright names no BSD-3-Clause"
    grep -qx "Copyright: $(sed -n '1s/^Copyright (c) \(.*\), \(.*\)$/\1 \2/p' "$src/LICENSE")" \
        "$copyright" || fail "$p: copyright does not name the holders of LICENSE"
    # The license text of LICENSE, as the copyright file's field holds it.
    text=$(sed -e '1,/^$/d' -e 's/^$/./' -e 's/^/ /' "$src/LICENSE")
    [[ $(cat "$copyright") == *"$text"* ]] || fail "$p: copyright lacks the text of LICENSE"
    entry=$(gzip -dc "$doc/changelog.gz" | head -n 1)
    must_equal "$p: changelog" "dlock ($version) unstable; urgency=medium" "$entry"
done
# The documents: the operator's with the agent, the developer's with the
# library, each in one package but the README, in both; over 4 KiB
# compressed, as Debian policy asks.
docs_of() { # PKG: the documents of the package, without .gz
    find "$tmp/x/$1/usr/share/doc/$1" -name '*.md*' -printf '%f\n' | sed 's/\.gz$//' | sort |
        paste -sd ' '
}
must_equal "the documents of dlockd" "README.md cluster.md deployment.md failover.md fencing.md \
logging.md monitoring.md quorum.md redis.md redisson.md restarts.md robustness.md status.md" \
    "$(docs_of dlockd)"
must_equal "the documents of libdlock-dev" "README.md architecture.md protocol.md testing.md" \
    "$(docs_of libdlock-dev)"
for p in $pkgs; do
    for f in "$tmp/x/$p/usr/share/doc/$p/"*.md; do
        [ -e "$f" ] || continue
        [ "$(stat -c %s "$f")" -le 4096 ] || fail "$p: ${f##*/} is over 4 KiB and not compressed"
    done
done
# Every /usr/share/doc path that an installed man page or the configuration
# names is in one of the packages; and none names a document by its place in
# the source tree (docs/NAME.md) alone.
named=$(for p in $pkgs; do
    find "$tmp/x/$p/usr/share/man" -name '*.gz' -exec gzip -dc {} + 2>/dev/null || true
done | cat - "$tmp/x/dlockd/etc/dlock/dlockd.conf" | sed 's/\\-/-/g')
paths=$(grep -oE '/usr/share/doc/[A-Za-z0-9._+/-]*[A-Za-z0-9_/]' <<<"$named" | sort -u)
[ -n "$paths" ] || fail "no /usr/share/doc path named in the man pages or the configuration"
for path in $paths; do
    found=
    for p in $pkgs; do
        [ -e "$tmp/x/$p$path" ] && found=$p
    done
    [ -n "$found" ] || fail "$path, named in a man page or the configuration, is in no package"
done
step "   the $(wc -w <<<"$paths") /usr/share/doc paths the man pages and the configuration name exist"
relative=$(grep -nE '(^|[^/A-Za-z])docs/[a-z]+\.md' <<<"$named" || true)
[ -z "$relative" ] || fail "a man page or the configuration names a document by its source path: $relative"
ls "$tmp/x/python3-dlock/usr/share/doc/python3-dlock/python.md"* >/dev/null 2>&1 ||
    fail "python3-dlock has no python.md in /usr/share/doc/python3-dlock"
# The monitoring examples (docs/monitoring.md), as they are in the source tree.
for f in "$src"/packaging/monitoring/*; do
    cmp -s "$f" "$tmp/x/dlockd/usr/share/doc/dlockd/examples/monitoring/${f##*/}" ||
        fail "dlockd has no ${f##*/} of packaging/monitoring in /usr/share/doc/dlockd/examples/monitoring"
done

# ---------------------------------------------------------------------------
step "5. dpkg --root: install, reinstall, remove, purge"
need systemd-sysusers "systemd"
need deb-systemd-helper init-system-helpers
# The maintainer scripts run without chroot, so as an unprivileged user, who
# cannot write outside the throwaway root if a script ignores DPKG_ROOT;
# fakeroot gives dpkg and the scripts the owners they set.
root=$tmp/root
mkdir -p "$root/var/lib/dpkg/info" "$root/var/lib/dpkg/updates" "$root/var/lib/dpkg/triggers"
touch "$root/var/lib/dpkg/status" "$tmp/fakeroot.state"
as_user=()
if [ "$(id -u)" = 0 ]; then
    chown -R nobody:nogroup "$root" "$tmp/fakeroot.state" "$debdir"
    chmod 755 "$tmp"
    as_user=(setpriv --reuid=nobody --regid=nogroup --clear-groups)
fi
# fakeroot [ARGS...]: a command as root in the throwaway world.
fake() {
    "${as_user[@]}" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME="$root" \
        fakeroot -i "$tmp/fakeroot.state" -s "$tmp/fakeroot.state" "$@"
}
dpkg_root() { # ARGS...: dpkg on the throwaway root; its output in dpkg.log
    fake dpkg --root="$root" --log="$root/dpkg.log" --force-script-chrootless --force-depends \
        "$@" >>"$tmp/dpkg.out" 2>&1 || fail "dpkg $*: $(cat "$tmp/dpkg.out")"
}
conf=$root/etc/dlock/dlockd.conf
owner_mode() { fake stat -c '%u:%g %a' "$1"; }

dpkg_root -i "${debs[@]}"
# shellcheck disable=SC2016 # dpkg-query's own ${...}
status=$(fake dpkg-query --admindir="$root/var/lib/dpkg" -W -f '${Package}: ${Status}\n' | sort)
must_equal "dpkg status after install" "dlockd: install ok installed
libdlock-dev: install ok installed
libdlock0: install ok installed
python3-dlock: install ok installed" "$status"
user=$(awk -F: '$1 == "dlock" { print $3 ":" $4 ":" $6 ":" $7 }' "$root/etc/passwd")
gid=$(awk -F: '$1 == "dlock" { print $3 }' "$root/etc/group")
[ -n "$gid" ] || fail "no group dlock in the root's /etc/group"
must_equal "user dlock (uid:gid:home:shell)" "${user%%:*}:$gid:/nonexistent:/usr/sbin/nologin" "$user"
must_equal "owner and mode of /etc/dlock/dlockd.conf" "0:$gid 640" "$(owner_mode "$conf")"
for unit in $units; do
    want=$(sed -n 's/^WantedBy=//p' "$src/packaging/$unit").wants
    [ -L "$root/etc/systemd/system/$want/$unit" ] || fail "$unit is not enabled ($want)"
done
# The stripped programs run.
for prog in usr/sbin/dlockd usr/bin/dlockctl; do
    out=$("$root/$prog" --version 2>&1) || fail "the installed $prog --version failed: $out"
    [[ $out == *" $version" ]] || fail "the installed $prog --version: expected $version, got '$out'"
done

# The installed module imports, and loads the installed library by its path
# (the throwaway root is not on the loader's search path). Not with a
# sanitizer build's library: an interpreter cannot load it without the
# sanitizer's runtime preloaded.
lib="$root/$libdir/libdlock.so.$(hdr_version MAJOR)"
if ! command -v python3 >/dev/null; then
    step "   python3 is not installed: the module's import is not checked"
elif [[ $(objdump -p "$lib") =~ NEEDED\ +lib(a|ub|t)san ]]; then
    step "   a sanitizer build's libdlock: the module's import is not checked"
else
    out=$(PYTHONPATH="$root/usr/lib/python3/dist-packages" PYTHONDONTWRITEBYTECODE=1 \
        DLOCK_LIBRARY="$lib" python3 -c 'import dlock; print(dlock.__version__)' 2>&1) ||
        fail "the installed python3-dlock does not import: $out"
    must_equal "the installed dlock module's version" "$version" "$out"
fi

# An administrator's mode stays through a reinstallation (configure with the
# old version: not a first installation).
fake chmod 0600 "$conf"
dpkg_root -i "$(deb dlockd)"
must_equal "mode of dlockd.conf after reinstalling" "0:$gid 600" "$(owner_mode "$conf")"

dpkg_root --remove dlockd
[ -f "$conf" ] || fail "removing dlockd removed its configuration"
[ ! -e "$root/usr/sbin/dlockd" ] || fail "removing dlockd left /usr/sbin/dlockd"
dpkg_root --purge dlockd python3-dlock libdlock-dev libdlock0
[ ! -e "$root/etc/dlock" ] || fail "purging dlockd left /etc/dlock: $(ls -A "$root/etc/dlock")"
left=$(find "$root" \( -path "$root/etc/systemd/*" -o -path "$root/var/lib/systemd/*" \) \
    \( -type f -o -type l \) -printf '/%P\n')
[ -z "$left" ] || fail "purging dlockd left the units' enablement: $left"
left=$(find "$root" \( -path "$root/usr/*" -o -path "$root/lib/*" \) ! -type d -printf '/%P\n')
[ -z "$left" ] || fail "purging left files: $left"

step "OK: dlock $version makes four lintian-clean Debian packages that install and purge"
