#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The leader-elected scheduler end to end: two instances start, one leads and fires jobs; the
# leader is killed (SIGKILL, as a crashed host) and the other takes over once the dead session
# expires; the killed one is restarted and waits as a follower; the new leader is stopped with
# SIGTERM, resigns, and the restarted one takes over at once. The journal must show one leader at
# a time, each term's jobs under one token, and tokens that grow from term to term.
#
# Usage: scenario.sh SERVERS SCHEDULER_BINARY
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: scenario.sh SERVERS SCHEDULER_BINARY" >&2; exit 64; }
servers=$1 scheduler=$2
scale=${ZKR_TEST_TIMEOUT_SCALE:-1}
work=$(mktemp -d)
journal=$work/journal
election=/zkr-examples/scheduler-$$
declare -A pids=()

cleanup() {
  for name in "${!pids[@]}"; do kill -KILL "${pids[$name]}" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

fail() {
  echo "scenario: FAILED: $*"
  for log in "$work"/*.log "$journal"; do [ -e "$log" ] && { echo "--- $log"; cat "$log"; }; done
  exit 1
}

wait_for() {  # wait_for SECONDS DESCRIPTION COMMAND...
  local seconds=$1 what=$2 tries
  shift 2
  tries=$(awk -v s="$seconds" -v k="$scale" 'BEGIN { printf "%d", s * k * 10 }')
  for ((i = 0; i < tries; i++)); do
    "$@" && return 0
    sleep 0.1
  done
  fail "$what (after ${seconds}s x $scale)"
}

start() {  # start NAME
  "$scheduler" "$servers" "$election" "$1" "$journal" --interval 0.1 --session-timeout 2 --tick-time 0.1 \
    >>"$work/$1.log" 2>&1 &
  pids[$1]=$!
}
last_leader() { [ -s "$journal" ] && tail -n 1 "$journal" | sed 's/.*leader=\([a-z]*\).*/\1/'; }
jobs_by() { grep -c "leader=$1 " "$journal" 2>/dev/null || true; }
leader_has_fired() { [ "$(last_leader)" = "$1" ] && [ "$(tail -n 3 "$journal" | grep -c "leader=$1 ")" -eq 3 ]; }
has_fired_three() { [ -s "$journal" ] && [ "$(wc -l <"$journal")" -ge 3 ]; }

start alpha
start beta
wait_for 30 "no instance led and fired three jobs" has_fired_three
first=$(last_leader)
case "$first" in alpha) second=beta ;; beta) second=alpha ;; *) fail "unknown leader '$first'" ;; esac
echo "scenario: $first leads; killing it (SIGKILL)"

kill -KILL "${pids[$first]}"
wait "${pids[$first]}" 2>/dev/null || true
unset "pids[$first]"
wait_for 30 "$second did not take over after $first died" leader_has_fired "$second"
echo "scenario: $second took over; restarting $first as a follower"
mv "$work/$first.log" "$work/$first-killed.log"

start "$first"
wait_for 30 "the restarted $first did not join" grep -q "joined the election" "$work/$first.log"
before=$(jobs_by "$first")
sleep 0.5
[ "$(jobs_by "$first")" -eq "$before" ] || fail "the restarted $first fired jobs while $second led"

kill -TERM "${pids[$second]}"
status=0
wait "${pids[$second]}" || status=$?
unset "pids[$second]"
[ "$status" -eq 0 ] || fail "$second exited $status after SIGTERM, expected 0"
grep -q "term .* ended (resigned)" "$work/$second.log" || fail "$second did not report its term ending"
wait_for 30 "$first did not take over after $second resigned" leader_has_fired "$first"
echo "scenario: $second resigned; $first leads again"

kill -TERM "${pids[$first]}"
status=0
wait "${pids[$first]}" || status=$?
unset "pids[$first]"
[ "$status" -eq 0 ] || fail "$first exited $status after SIGTERM, expected 0"

# The journal: consecutive runs of one (leader, token); tokens strictly growing between runs.
terms=$(awk '{ print $1, $2 }' "$journal" | uniq)
echo "scenario: terms in the journal:"
echo "$terms"
[ "$(wc -l <<<"$terms")" -eq 3 ] || fail "expected 3 terms in the journal"
previous=0
while read -r token_field leader_field; do
  token=${token_field#token=}
  [ "$token" -gt "$previous" ] || fail "term of ${leader_field#leader=} has token $token, not above $previous"
  [ "$(grep -c "^$token_field " "$journal")" -eq "$(grep -c "^$token_field $leader_field " "$journal")" ] ||
    fail "token $token was used by more than one leader"
  previous=$token
done <<<"$terms"
[ "$(awk '{ print $1 }' "$journal" | sort -u | wc -l)" -eq 3 ] || fail "a term's token shows up in two runs (leaders interleaved)"

echo "scenario: PASSED: one leader at a time, tokens growing from term to term"
