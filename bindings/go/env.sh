# SPDX-License-Identifier: BSD-3-Clause
# Sourced by bindings/go/run-tests and bench/bindings/go/run: the Go build
# environment over an uninstalled C build tree ($DLOCK_BUILD_DIR). Everything
# it writes goes under $DLOCK_BUILD_DIR/bindings-go/.

if [[ -z "${DLOCK_BUILD_DIR:-}" || "${DLOCK_BUILD_DIR}" != /* ]]; then
    echo "DLOCK_BUILD_DIR must be the absolute path of a dlock build tree" >&2
    exit 2
fi
DLOCK_GO_SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
DLOCK_GO_STATE="$DLOCK_BUILD_DIR/bindings-go"
if [[ -n "${DLOCK_LIBRARY:-}" ]]; then
    DLOCK_GO_LIBDIR="$(cd "$(dirname "$DLOCK_LIBRARY")" && pwd)"
else
    DLOCK_GO_LIBDIR="$DLOCK_BUILD_DIR/libclient"
fi
if [[ ! -e "$DLOCK_GO_LIBDIR/libdlock.so" && ! -e "$DLOCK_GO_LIBDIR/libdlock.so.0" ]]; then
    echo "no libdlock in $DLOCK_GO_LIBDIR (build the C tree first)" >&2
    exit 2
fi
mkdir -p "$DLOCK_GO_STATE/pkgconfig" "$DLOCK_GO_STATE/lib"
# The linker wants libdlock.so; an uninstalled tree (or DLOCK_LIBRARY) may
# have only the soname.
if [[ ! -e "$DLOCK_GO_LIBDIR/libdlock.so" ]]; then
    ln -sfn "$DLOCK_GO_LIBDIR/libdlock.so.0" "$DLOCK_GO_STATE/lib/libdlock.so"
    DLOCK_GO_LIBDIR="$DLOCK_GO_STATE/lib"
fi
cat > "$DLOCK_GO_STATE/pkgconfig/dlock.pc.tmp" <<PC
Name: dlock
Description: client library of the dlock distributed-lock agent (uninstalled)
Version: 0.1.0
Libs: -L$DLOCK_GO_LIBDIR -ldlock
Cflags: -I$DLOCK_GO_SRC/include
PC
mv -f "$DLOCK_GO_STATE/pkgconfig/dlock.pc.tmp" "$DLOCK_GO_STATE/pkgconfig/dlock.pc"

export PKG_CONFIG_PATH="$DLOCK_GO_STATE/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
export LD_LIBRARY_PATH="$DLOCK_GO_LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export GOPATH="$DLOCK_GO_STATE/gopath"
export GOCACHE="$DLOCK_GO_STATE/gocache"
export GOMODCACHE="$DLOCK_GO_STATE/gomodcache"
export GOFLAGS="-modcacherw -mod=readonly"
export GOTOOLCHAIN=local
export CGO_ENABLED=1
