#!/bin/sh
# rdmakit shm vs UCX shared memory (UCX_TLS=posix,cma) vs one-core memcpy, same run,
# alternating, pinned (server CPU 0, client CPU 1). Extra arguments go to compare.py (--reps, --sizes, ...).
set -e
here=$(cd "$(dirname "$0")" && pwd)
build=${BUILD:-$here/../build-perf}
g++ -std=c++20 -O2 -o "$build/baseline" "$here/baseline.cpp"
exec /usr/bin/python3 "$here/compare.py" shm "$@"
