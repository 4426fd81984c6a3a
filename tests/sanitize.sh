#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Builds the project with a sanitizer and runs the test suite under it.
#
#   tests/sanitize.sh address [BUILD_DIR] [CTEST_ARGS...]   AddressSanitizer + UndefinedBehaviorSanitizer
#   tests/sanitize.sh thread  [BUILD_DIR] [CTEST_ARGS...]   ThreadSanitizer
#
# BUILD_DIR defaults to build-asan or build-tsan next to the sources. JOBS (default 2) sets the
# build's parallelism and ctest's. ZKR_TEST_TIMEOUT_SCALE (default 3 for address, 6 for thread)
# stretches every test timeout, since instrumented code runs slower.
#
# What runs: the whole suite except the short soak (a load test of two minutes that proves nothing
# more under a sanitizer than its own client and store do in the other tests) and the libFuzzer
# runs (built by clang with their own ASan/UBSan whatever this build uses). The corpus replays of
# the fuzz targets do run, instrumented. Exit status: ctest's.
set -eu

kind=${1:-}
case "$kind" in
  address) default_dir=build-asan; default_scale=3 ;;
  thread) default_dir=build-tsan; default_scale=6 ;;
  *) echo "usage: $0 address|thread [BUILD_DIR] [CTEST_ARGS...]" >&2; exit 64 ;;
esac
shift
source_dir=$(cd "$(dirname "$0")/.." && pwd)
build_dir=${1:-$source_dir/$default_dir}
[ $# -gt 0 ] && shift
jobs=${JOBS:-2}

start=$(date +%s)
cmake -S "$source_dir" -B "$build_dir" -DZKR_SANITIZE="$kind" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DZKR_BUILD_BENCH=OFF -DZKR_BUILD_EXAMPLES=OFF
cmake --build "$build_dir" -j"$jobs"
built=$(date +%s)

export ZKR_TEST_TIMEOUT_SCALE="${ZKR_TEST_TIMEOUT_SCALE:-$default_scale}"
# Stop at the first report, with stacks; leaks are reported at exit of each process.
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:detect_stack_use_after_return=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
export TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:history_size=4:suppressions=$source_dir/tests/tsan.supp}"
export LSAN_OPTIONS="${LSAN_OPTIONS:-suppressions=$source_dir/tests/lsan.supp}"

status=0
ctest --test-dir "$build_dir" -j"$jobs" --output-on-failure \
  -E '^(soak_short|soak_long|fuzz_paths|fuzz_servers|fuzz_contender_names|fuzz_zklock_args)$' "$@" || status=$?
finished=$(date +%s)
echo "sanitize.sh $kind: build $((built - start)) s, tests $((finished - built)) s, ctest status $status"
exit $status
