#!/bin/sh
# Fails if any of our C/C++ sources is not formatted by clang-format with
# the .clang-format file that governs it.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
bad=0
for f in $(find include common qemu-hw fabric-switch guest-driver guest-provider guest/traffic guest/mpi guest/common tests/unit tests/fuzz \
        -name '*.c' -o -name '*.h' -o -name '*.cc' -o -name '*.hh' 2>/dev/null | sort); do
    if ! clang-format --dry-run --Werror "$f" >/dev/null 2>&1; then
        echo "not formatted: $f (run clang-format -i $f)"
        bad=1
    fi
done
exit $bad
