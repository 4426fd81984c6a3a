#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs the command line of a cron or systemd recipe exactly as written, against a test server,
# with zklock from the build tree, and checks that it does what the recipe's comments promise:
# one run at a time, the others skip quietly (cron) or with a success status (systemd); with
# --once-per, one run a day, a later start skips too; the fencing token reaches the job; a stop
# signal to zklock stops the job and frees the lock.
#
#   check_zklock_recipe.sh cron SERVERS ZKLOCK CRONTAB_FILE
#   check_zklock_recipe.sh systemd SERVERS ZKLOCK SERVICE_FILE TIMER_FILE
#
# Only two things are substituted: the ensemble (ZKLOCK_SERVERS) becomes SERVERS with a chroot of
# this run's own (so that a --once-per record of an earlier run counts for nothing), and the paths
# of zklock and of the report (systemd; cron finds both on PATH) point at the build tree and at
# a stand-in report script. Every wait is bounded (scaled by ZKR_TEST_TIMEOUT_SCALE); every
# process started is stopped.
set -euo pipefail

fail() {
  echo "recipe: FAILED: $*"
  exit 1
}
[ $# -ge 4 ] || fail "usage: check_zklock_recipe.sh cron|systemd SERVERS ZKLOCK FILE..."
kind=$1 servers=$2 zklock=$3
scale=${ZKR_TEST_TIMEOUT_SCALE:-1}
work=$(mktemp -d)
background_pid=''
cleanup() {
  if [ -n "$background_pid" ]; then
    touch "$work/finish"
    kill "$background_pid" 2>/dev/null || true
    wait "$background_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
  [ -z "${chroot:-}" ] || (zk_node delete "$chroot") >/dev/null 2>&1 || true
}
trap cleanup EXIT

# The stand-in report: records its token, then holds the lock until told to finish.
mkdir -p "$work/bin"
cat >"$work/bin/nightly-report" <<'REPORT'
#!/bin/sh
echo "$ZKLOCK_FENCING_TOKEN" >>"$RECIPE_WORK/runs"
touch "$RECIPE_WORK/running"
i=0
while [ ! -e "$RECIPE_WORK/finish" ] && [ "$i" -lt "$RECIPE_MAX_TICKS" ]; do sleep 0.1; i=$((i + 1)); done
rm -f "$RECIPE_WORK/running"
REPORT
chmod +x "$work/bin/nightly-report"
max_ticks=$(awk -v k="$scale" 'BEGIN { printf "%d", 600 * k }')

wait_for() {  # wait_for SECONDS DESCRIPTION COMMAND...
  local seconds=$1 what=$2 tries
  shift 2
  tries=$(awk -v s="$seconds" -v k="$scale" 'BEGIN { printf "%d", s * k * 10 }')
  for ((i = 0; i < tries; i++)); do
    "$@" && return 0
    if [ -n "$background_pid" ] && ! kill -0 "$background_pid" 2>/dev/null; then
      fail "$what: the first run ended early"
    fi
    sleep 0.1
  done
  fail "$what (after ${seconds}s x $scale)"
}

# ---- the command line and environment, as cron or systemd would use them ----
environment=()
command_line=()
success_statuses=(0)
if [ "$kind" = cron ]; then
  [ $# -eq 4 ] || fail "usage: check_zklock_recipe.sh cron SERVERS ZKLOCK CRONTAB_FILE"
  crontab=$4
  cron_path=/usr/bin:/bin cron_shell=/bin/sh job=''
  while IFS= read -r line; do
    [[ "$line" =~ ^[[:space:]]*(#|$) ]] && continue
    if [[ "$line" =~ ^([A-Za-z_][A-Za-z0-9_]*)=(.*)$ ]]; then
      name=${BASH_REMATCH[1]} value=${BASH_REMATCH[2]}
      case "$name" in
        PATH) cron_path=$value ;;
        SHELL) cron_shell=$value ;;
        ZKLOCK_SERVERS) ;;  # replaced by the test server below
        *) environment+=("$name=$value") ;;
      esac
      continue
    fi
    [ -z "$job" ] || fail "$crontab has more than one job line"
    job=$line
  done <"$crontab"
  [ -n "$job" ] || fail "$crontab has no job line"
  # /etc/cron.d format: five time fields, the user, then the command, given to the shell as is.
  read -r _ _ _ _ _ user command <<<"$job"
  [ -n "$command" ] || fail "cannot read the command of: $job"
  echo "recipe: cron line for user $user runs: $command"
  environment+=("PATH=$work/bin:$(dirname "$zklock"):$cron_path" "SHELL=$cron_shell")
  command_line=("$cron_shell" -c "$command")
  conflict_status=1
elif [ "$kind" = systemd ]; then
  [ $# -eq 5 ] || fail "usage: check_zklock_recipe.sh systemd SERVERS ZKLOCK SERVICE_FILE TIMER_FILE"
  service=$4 timer=$5
  exec_start=$(sed -n 's/^ExecStart=//p' "$service")
  [ "$(wc -l <<<"$exec_start")" -eq 1 ] && [ -n "$exec_start" ] || fail "$service needs exactly one ExecStart="
  grep -q '^KillMode=mixed$' "$service" || fail "$service should use KillMode=mixed (see its comment)"
  grep -q '^OnCalendar=' "$timer" || fail "$timer has no OnCalendar="
  while IFS= read -r assignment; do
    [[ "$assignment" == ZKLOCK_SERVERS=* ]] || environment+=("$assignment")
  done < <(sed -n 's/^Environment=//p' "$service")
  read -r -a statuses <<<"$(sed -n 's/^SuccessExitStatus=//p' "$service")"
  success_statuses+=("${statuses[@]}")
  read -r -a words <<<"$exec_start"
  for i in "${!words[@]}"; do
    case "${words[$i]}" in
      /usr/bin/zklock) words[i]=$zklock ;;
      /usr/local/bin/nightly-report) words[i]=$work/bin/nightly-report ;;
    esac
  done
  echo "recipe: ExecStart runs: $exec_start"
  # systemd's own checker, on copies whose programs exist here (it runs offline).
  if command -v systemd-analyze >/dev/null; then
    mkdir -p "$work/units"
    sed -e "s|/usr/bin/zklock|$zklock|" -e "s|/usr/local/bin/nightly-report|$work/bin/nightly-report|" \
      "$service" >"$work/units/$(basename "$service")"
    cp "$timer" "$work/units/"
    systemd-analyze verify --man=no "$work/units/$(basename "$service")" "$work/units/$(basename "$timer")" ||
      fail "systemd-analyze verify refuses the units"
    echo "recipe: systemd-analyze verify accepts the service and the timer"
  else
    echo "recipe: systemd-analyze not installed; units not verified"
  fi
  environment+=("PATH=/usr/bin:/bin")
  command_line=("${words[@]}")
  conflict_status=$(sed -n 's/.* -E \([0-9]*\) .*/\1/p' <<<"$exec_start")
  if [[ " $exec_start " == *" --once-per "* ]]; then
    conflict_status=0  # a run claimed elsewhere: exit 0
  fi
  [ -n "$conflict_status" ] || fail "the ExecStart has neither -E nor --once-per: a skipped run would count as a failure"
else
  fail "unknown recipe kind '$kind' (cron, systemd)"
fi
once_per=false
[[ " ${command_line[*]} " == *" --once-per "* ]] && once_per=true
# This run's chroot, created first (zklock refuses a chroot that does not exist).
chroot=/recipe-$$-$RANDOM
zk_node() {  # zk_node create|delete PATH: on SERVERS, without a chroot
  /usr/bin/python3 - "$servers" "$1" "$2" <<'PYTHON' || fail "cannot $2 $3 on $servers"
import sys
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
servers, action, path = sys.argv[1:]
client = KazooClient(hosts=servers, timeout=10)
client.start(timeout=30)
try:
    if action == "create":
        client.ensure_path(path)
    else:
        try:
            client.delete(path, recursive=True)
        except NoNodeError:
            pass
finally:
    client.stop()
PYTHON
}
zk_node create "$chroot"
environment+=("ZKLOCK_SERVERS=$servers$chroot" "HOME=$work" "RECIPE_WORK=$work" "RECIPE_MAX_TICKS=$max_ticks")

run_recipe() { env -i "${environment[@]}" "${command_line[@]}"; }
# In the background, as its own process: the pid is that of the command line itself (zklock for
# systemd), so that signals reach it as systemd's would.
start_recipe() {
  (exec env -i "${environment[@]}" "${command_line[@]}") >"$1" 2>&1 &
  background_pid=$!
}
is_success() {
  local status=$1
  for ok in "${success_statuses[@]}"; do [ "$status" = "$ok" ] && return 0; done
  return 1
}
runs() { [ -e "$work/runs" ] && wc -l <"$work/runs" || echo 0; }
lock_is_free() {
  env -i "${environment[@]}" "$zklock" --list /jobs/nightly-report --json | grep -q '"contenders":\[\]'
}

# 1. The first host runs the report and holds the lock while it does.
start_recipe "$work/first.log"
wait_for 30 "the first run did not start the report" test -e "$work/running"

# 2. The second host finds the lock held and skips, silently and with the conflict status.
status=0
run_recipe >"$work/second.log" 2>&1 || status=$?
[ "$status" -eq "$conflict_status" ] || { cat "$work/second.log"; fail "the skipped run exited $status, expected $conflict_status"; }
is_success "$status" || [ "$kind" = cron ] || fail "the skipped run's status $status is not a success for systemd"
[ "$kind" = systemd ] || [ ! -s "$work/second.log" ] || { cat "$work/second.log"; fail "the skipped cron run printed something (cron would mail it)"; }
[ "$(runs)" -eq 1 ] || fail "the report ran $(runs) times while the lock was held"
echo "recipe: a second start while the report runs skipped it (exit $status)"

# 3. The first run finishes and succeeds.
touch "$work/finish"
status=0
wait "$background_pid" || status=$?
background_pid=''
is_success "$status" || { cat "$work/first.log"; fail "the first run exited $status"; }

# 4. The lock is free as soon as the run has exited, and the next start runs the report again,
#    with a larger fencing token. With --once-per 1d, a start later the same day skips (exit 0);
#    once the day's record is deleted (the documented way to allow another run), it runs.
lock_is_free || fail "the lock is still held after the first run exited"
if $once_per; then
  day=$(date -u +%F)
  status=0
  run_recipe >"$work/same-day.log" 2>&1 || status=$?
  [ "$status" -eq 0 ] || { cat "$work/same-day.log"; fail "a start after the day's run exited $status"; }
  [ "$(runs)" -eq 1 ] || [ "$(date -u +%F)" != "$day" ] || fail "the report ran twice in one day"
  echo "recipe: a start after the day's run skipped it (exit 0)"
  zk_node delete "$chroot/jobs/nightly-report/zklock.last-run"
fi
status=0
run_recipe >"$work/third.log" 2>&1 || status=$?
is_success "$status" || { cat "$work/third.log"; fail "the next run exited $status"; }
[ "$(runs)" -eq 2 ] || fail "the report ran $(runs) times, expected 2"
first_token=$(sed -n 1p "$work/runs") second_token=$(sed -n 2p "$work/runs")
[[ "$first_token" =~ ^[0-9]+$ ]] && [ "$second_token" -gt "$first_token" ] ||
  fail "fencing tokens '$first_token' then '$second_token': expected growing numbers"
echo "recipe: runs got fencing tokens $first_token then $second_token"

# 5. Stopping: SIGTERM to zklock alone (systemd's KillMode=mixed; cron has no stop) reaches the
#    report through zklock, and the lock is free afterwards.
if [ "$kind" = systemd ]; then
  rm -f "$work/finish"
  ! $once_per || zk_node delete "$chroot/jobs/nightly-report/zklock.last-run"
  start_recipe "$work/stopped.log"
  wait_for 30 "the run to be stopped did not start the report" test -e "$work/running"
  kill -TERM "$background_pid"
  status=0
  wait "$background_pid" || status=$?
  background_pid=''
  [ "$status" -eq 143 ] || { cat "$work/stopped.log"; fail "zklock stopped by SIGTERM exited $status, expected 143 (the report's)"; }
  [ -e "$work/running" ] || fail "the report finished by itself instead of being stopped"
  touch "$work/finish"
  lock_is_free || fail "the lock is still held after zklock was stopped"
  status=0
  ! $once_per || zk_node delete "$chroot/jobs/nightly-report/zklock.last-run"
  run_recipe >"$work/after-stop.log" 2>&1 || status=$?
  [ "$status" -eq 0 ] || { cat "$work/after-stop.log"; fail "the run after the stop exited $status"; }
  echo "recipe: SIGTERM to zklock stopped the report (exit 143) and freed the lock"
fi

echo "recipe: PASSED ($kind)"
