#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The fenced store end to end: writer A takes the lock and freezes (SIGSTOP) just before its write;
# its session expires, writer B is granted the lock with a larger token and writes; A wakes up and
# sends its write with the old token, and the store refuses it. The store ends up with B's value.
#
# Usage: scenario.sh SERVERS STORE_BINARY WRITER_BINARY
# Stops every process it started, whatever happens. Waits are bounded and scaled by
# ZKR_TEST_TIMEOUT_SCALE (default 1).
set -euo pipefail

[ $# -eq 3 ] || { echo "usage: scenario.sh SERVERS STORE_BINARY WRITER_BINARY" >&2; exit 64; }
servers=$1 store=$2 writer=$3
scale=${ZKR_TEST_TIMEOUT_SCALE:-1}
work=$(mktemp -d)
lock_path=/zkr-examples/fenced-store-$$
store_pid='' writer_a_pid=''

cleanup() {
  if [ -n "$writer_a_pid" ]; then kill -CONT "$writer_a_pid" 2>/dev/null || true; kill "$writer_a_pid" 2>/dev/null || true; fi
  if [ -n "$store_pid" ]; then kill "$store_pid" 2>/dev/null || true; fi
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

fail() {
  echo "scenario: FAILED: $*"
  for log in "$work"/*.log; do echo "--- $log"; cat "$log"; done
  exit 1
}

# wait_for SECONDS DESCRIPTION COMMAND...: polls COMMAND every 0.1 s.
wait_for() {
  local seconds=$1 what=$2
  shift 2
  local tries
  tries=$(awk -v s="$seconds" -v k="$scale" 'BEGIN { printf "%d", s * k * 10 }')
  for ((i = 0; i < tries; i++)); do
    "$@" && return 0
    sleep 0.1
  done
  fail "$what (after ${seconds}s x $scale)"
}

# True once the process is stopped (SIGSTOP); fails the scenario at once if it has exited.
is_stopped() {
  local state
  state=$(ps -o stat= -p "$1" 2>/dev/null) || fail "writer A exited instead of pausing"
  [[ "$state" == T* ]]
}

"$store" --port-file "$work/port" >"$work/store.log" 2>&1 &
store_pid=$!
wait_for 10 "the store did not write its port file" test -s "$work/port"
port=$(cat "$work/port")
echo "scenario: store on 127.0.0.1:$port, lock $lock_path"

"$writer" "$servers" "$lock_path" "$port" report A --session-timeout 2 --tick-time 0.1 --pause-before-write >"$work/writer-a.log" 2>&1 &
writer_a_pid=$!
wait_for 30 "writer A did not take the lock and pause" is_stopped "$writer_a_pid"
cat "$work/writer-a.log"

# A is frozen with the lock: B waits until A's session expires on the server, then writes.
status=0
b_wait=$(awk -v k="$scale" 'BEGIN { printf "%d", 30 * k }')
"$writer" "$servers" "$lock_path" "$port" report B --session-timeout 2 --tick-time 0.1 --wait "$b_wait" >"$work/writer-b.log" 2>&1 || status=$?
cat "$work/writer-b.log"
[ "$status" -eq 0 ] || fail "writer B exited $status, expected 0 (accepted)"

kill -CONT "$writer_a_pid"
status=0
wait "$writer_a_pid" || status=$?
writer_a_pid=''
cat "$work/writer-a.log"
[ "$status" -eq 3 ] || fail "writer A exited $status, expected 3 (its stale write refused)"

token_a=$(sed -n "s/.*writer 'A': granted .* fencing token \([0-9]*\).*/\1/p" "$work/writer-a.log")
token_b=$(sed -n "s/.*writer 'B': granted .* fencing token \([0-9]*\).*/\1/p" "$work/writer-b.log")
[ -n "$token_a" ] && [ -n "$token_b" ] || fail "could not read both tokens"
[ "$token_b" -gt "$token_a" ] || fail "B's token $token_b is not larger than A's $token_a"

exec 3<>"/dev/tcp/127.0.0.1/$port"
echo "READ report" >&3
read -r reply <&3
exec 3<&-
echo "scenario: READ report -> $reply"
[ "$reply" = "VALUE $token_b B" ] || fail "the store holds '$reply', expected B's value with token $token_b"

cat "$work/store.log"
echo "scenario: PASSED: A's stale write (token $token_a) refused after B's (token $token_b)"
