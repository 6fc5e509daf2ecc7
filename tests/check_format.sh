#!/bin/sh
# Fails if any of our C/C++ sources is not formatted by clang-format with
# the .clang-format file that governs it (clang-format finds it per file).
# The files go 40 to a clang-format and two of those at once: one process
# per file spent most of half a minute starting up.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
status=0
errors=$(find include common qemu-hw fabric-switch guest-driver guest-provider guest/traffic guest/mpi guest/common tests/unit tests/fuzz \
        \( -name '*.c' -o -name '*.h' -o -name '*.cc' -o -name '*.hh' \) -print 2>/dev/null | sort |
    xargs -P 2 -n 40 clang-format --dry-run --Werror 2>&1 >/dev/null) || status=$?
bad=$(printf '%s\n' "$errors" | sed -n 's/^\(.*\):[0-9]*:[0-9]*: error: .*clang-format-violations.*/\1/p' | sort -u)
for f in $bad; do
    echo "not formatted: $f (run clang-format -i $f)"
done
if [ "$status" -ne 0 ] && [ -z "$bad" ]; then
    # clang-format failed for another reason: say what it said.
    printf '%s\n' "$errors"
fi
[ "$status" -eq 0 ] && [ -z "$bad" ]
