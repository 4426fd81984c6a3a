#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""The one lifecycle of every process testenv starts: ZooKeeper servers (zkenv.py), PostgreSQL
(pgenv.py) and the servers of a namespace lab (netlab.py) all start, wait, stop and get cleaned up
through this module. Standard library only.

A managed process is a record (a dict) holding "pid" and "start", its start time in clock ticks
since boot from /proc/PID/stat. A pid can be reused once its process is gone; the pair cannot, so
only a process this module started, and only while it still runs, is ever signalled.

A managed directory holds a tool's state and an owner.json naming the owning test process (pid and
start time), the command that stops what runs there, and a watchdog: a small process of its own
session that, once the owner is gone, runs that command and removes the directory. If the watchdog
is gone too (killed with the test's process group, say), the reaper run by the next start in the
same parent directory does the same for every `zkr-*` directory whose owner and watchdog are both
gone. Written first by the C++ side (managed_directory.cpp) with the owner alone, so a test killed
before any server started leaves nothing either.

  lifecycle.py release --dir DIR [--keep]   stop, end the watchdog, remove DIR (or keep it)
  lifecycle.py reap --parent DIR            clean up orphan zkr-* directories in DIR
  lifecycle.py watchdog --dir DIR           (started by own())
"""

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

OWNER_FILE = "owner.json"
STATE_FILE = "state.json"
WATCHDOG_POLL_S = 0.5
KILL_WAIT_S = 5.0
ORPHAN_PREFIX = "zkr-"


class EnvError(Exception):
    """A failure with a message meant for the person running the tests."""


class PortClash(EnvError):
    """A process could not bind a port chosen for it: the start is retried on fresh ports."""


# ---------------------------------------------------------------------------------------------
# Processes


def _stat(pid):
    """(state letter, start time) of pid, or None if there is no such process."""
    if not pid:
        return None
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
        # The fields follow the parenthesised command name, which may itself hold spaces.
        fields = text[text.rindex(")") + 2:].split()
        return fields[0], int(fields[19])
    except (OSError, ValueError, IndexError):
        return None


def start_time(pid):
    """The start time of a live (not zombie) pid, or None."""
    stat = _stat(pid)
    return stat[1] if stat and stat[0] not in "ZX" else None


def running(record):
    """True while the process the record names runs: same pid, same start time, not a zombie."""
    return bool(record.get("pid")) and start_time(record["pid"]) == record.get("start")


def launch(record, argv, log, what, **popen):
    """Starts argv in a session of its own (ctest killing a test's process group spares it), output
    appended to `log`, and records its pid and start time in `record`."""
    try:
        with open(log, "ab") as out, open(os.devnull, "rb") as devnull:
            process = subprocess.Popen(argv, stdin=devnull, stdout=out, stderr=out,
                                       start_new_session=True, close_fds=True, **popen)
    except OSError as e:
        raise EnvError(f"cannot start {what}: {e}")
    # Our unreaped child cannot lose its pid to another process, exited or not.
    record["pid"], record["start"] = process.pid, _stat(process.pid)[1]
    # Popen would warn when collected with the child still running: handed over on purpose.
    process.returncode = 0
    return record


def send(record, sig):
    """Signals the recorded process if it still runs; False if it does not."""
    if not running(record):
        return False
    try:
        os.kill(record["pid"], sig)
    except ProcessLookupError:
        return False
    return True


def exited(record):
    """True once the recorded process has exited. Asks waitpid() first for our own child: right
    after exec, /proc can lag behind a healthy process on a loaded machine."""
    try:
        pid, _ = os.waitpid(record["pid"], os.WNOHANG)
        return pid != 0
    except ChildProcessError:
        return not running(record)


def wait_gone(record, timeout_s):
    deadline = time.monotonic() + timeout_s
    while running(record):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def stop(records, what, grace_s=10.0, term=signal.SIGTERM):
    """Stops the recorded processes: `term` to all (and CONT, in case one is frozen), then KILL what
    is left after the grace period. Clears each record's pid; raises if one survives KILL."""
    for record in records:
        if send(record, term):
            send(record, signal.SIGCONT)
    failures = []
    for record in records:
        if not wait_gone(record, grace_s):
            send(record, signal.SIGKILL)
            if not wait_gone(record, KILL_WAIT_S):
                failures.append(f"{what(record)} (pid {record['pid']}) survived SIGKILL")
                continue
        record["pid"] = None
    if failures:
        raise EnvError("; ".join(failures))


def kill(record, what):
    """SIGKILL; killing a process that is not running is an error (a test meant another one)."""
    if not send(record, signal.SIGKILL):
        record["pid"] = None
        raise EnvError(f"{what} is not running: nothing to kill")
    send(record, signal.SIGCONT)
    if not wait_gone(record, KILL_WAIT_S):
        raise EnvError(f"{what} (pid {record['pid']}) survived SIGKILL")
    record["pid"] = None


def signal_running(record, sig, what):
    if not send(record, sig):
        raise EnvError(f"{what} is not running")


# ---------------------------------------------------------------------------------------------
# Starting: ports, readiness, retries


def free_ports(count):
    """Ports the kernel just handed out on 127.0.0.1, held together so they are distinct. Another
    process may take one before ours binds it: wait_ready() reports that as a PortClash."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def log_tail(path, lines=15):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return ""


BIND_FAILURES = ("Address already in use", "BindException", "could not bind")


def bind_failed(record):
    """True if one of the record's logs says a port was taken."""
    for path in record.get("logs", []):
        text = log_tail(path, 200)
        if any(words in text for words in BIND_FAILURES):
            return True
    return False


def wait_ready(records, pending, timeout_s, what, poll_s=0.1):
    """Waits until pending() returns None (ready). pending() returns what is still missing, for the
    message. A process that exits meanwhile ends the wait: a PortClash if its log says a port was
    taken, else an EnvError with its logs' tails."""
    deadline = time.monotonic() + timeout_s
    while True:
        for record in records:
            if exited(record):
                if bind_failed(record):
                    raise PortClash(f"{what(record)} could not bind its ports")
                tails = "".join(log_tail(path) for path in record.get("logs", []))
                raise EnvError(f"{what(record)} (pid {record['pid']}) exited during start; "
                               f"logs {', '.join(record.get('logs', []))}:\n{tails}")
        missing = pending()
        if missing is None:
            return
        if time.monotonic() >= deadline:
            for record in records:
                if bind_failed(record):
                    raise PortClash(f"{what(record)} could not bind its ports")
            raise EnvError(f"not ready after {timeout_s:.0f} s: {missing}")
        time.sleep(poll_s)


def require_owner(state_dir):
    """Raises if state_dir's owner died while it was being started: the watchdog may already have
    cleaned up, and would not see what the start launched afterwards."""
    record = read_owner(state_dir)
    if record and record.get("owner_pid") and not owner_alive(record):
        raise EnvError(f"the owner of {state_dir} (pid {record['owner_pid']}) is gone")


def start_with_retries(state_dir, attempt, clean_up, attempts=3):
    """Runs attempt() until it returns; after a failure, clean_up() stops what it started. Only a
    PortClash is retried (attempt() chooses fresh ports each time)."""
    for number in range(1, attempts + 1):
        try:
            result = attempt()
            require_owner(state_dir)
            return result
        except BaseException as e:
            clean_up()
            if isinstance(e, PortClash) and number < attempts:
                continue
            raise


# ---------------------------------------------------------------------------------------------
# State files


def read_json(path):
    """The JSON in path; None if the file is missing."""
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise EnvError(f"cannot read {path}: {e}")


def write_json(path, value):
    """Replaces path atomically (readers never see half a file); readable by its owner only."""
    temporary = path + ".tmp"
    with open(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
        json.dump(value, f, indent=2)
        f.write("\n")
    os.replace(temporary, path)


def load_state(state_dir):
    return read_json(os.path.join(state_dir, STATE_FILE))


def require_state(state_dir, what):
    state = load_state(state_dir)
    if state is None:
        raise EnvError(f"no {what} recorded in {state_dir} (missing {STATE_FILE})")
    return state


def save_state(state_dir, state):
    write_json(os.path.join(state_dir, STATE_FILE), state)


# ---------------------------------------------------------------------------------------------
# Owned directories: owner record, watchdog, reaper


def owner_path(state_dir):
    return os.path.join(state_dir, OWNER_FILE)


def read_owner(state_dir):
    return read_json(owner_path(state_dir))


def own(state_dir, owner_pid, stop_argv, remove_dir):
    """Makes owner_pid the owner of state_dir: records it and the command that stops what runs
    there, and starts the watchdog. Also reaps the orphans next to state_dir first."""
    owner_start = start_time(owner_pid)
    if owner_start is None:
        raise EnvError(f"--owner-pid {owner_pid} is not a running process")
    reap(os.path.dirname(state_dir), skip=state_dir)
    record = read_owner(state_dir) or {}
    end_watchdog(record)  # one left from an earlier run would act for the wrong owner
    record.update({"owner_pid": owner_pid, "owner_start": owner_start, "stop": stop_argv,
                   "remove_dir": remove_dir, "released": False})
    write_json(owner_path(state_dir), record)
    watchdog = launch({}, [sys.executable, os.path.abspath(__file__), "watchdog", "--dir", state_dir],
                      os.devnull, "the watchdog")
    record.update({"watchdog_pid": watchdog["pid"], "watchdog_start": watchdog["start"]})
    write_json(owner_path(state_dir), record)


def owner_alive(record):
    return running({"pid": record.get("owner_pid"), "start": record.get("owner_start")})


def watchdog_alive(record):
    return running({"pid": record.get("watchdog_pid"), "start": record.get("watchdog_start")})


def end_watchdog(record):
    if record.get("watchdog_pid") != os.getpid():
        send({"pid": record.get("watchdog_pid"), "start": record.get("watchdog_start")},
             signal.SIGTERM)
    record["watchdog_pid"] = record["watchdog_start"] = None


def clean_up(state_dir, record, keep=False):
    """Runs the recorded stop command, then removes the directory (or marks it released)."""
    failure = None
    if record.get("stop"):
        try:
            result = subprocess.run(record["stop"], stdin=subprocess.DEVNULL, capture_output=True,
                                    text=True, timeout=300)
            if result.returncode != 0:
                failure = (result.stderr or result.stdout).strip()
        except (OSError, subprocess.TimeoutExpired) as e:
            failure = str(e)
    if failure is not None:
        raise EnvError(f"stopping what runs in {state_dir} failed: {failure}")
    if keep or not record.get("remove_dir", True):
        record["released"] = True
        write_json(owner_path(state_dir), record)
    else:
        shutil.rmtree(state_dir, ignore_errors=True)


def release(state_dir, keep):
    """The owner's own clean-up: stop, end the watchdog, remove the directory unless kept."""
    record = read_owner(state_dir)
    if record is None:
        raise EnvError(f"{state_dir} has no {OWNER_FILE}: not a managed directory")
    end_watchdog(record)
    write_json(owner_path(state_dir), record)
    clean_up(state_dir, record, keep)


def watch(state_dir):
    """The watchdog: cleans up once the owner is gone; ends when the directory is released or
    removed, or another watchdog took over."""
    while True:
        time.sleep(WATCHDOG_POLL_S)
        try:
            record = read_owner(state_dir)
        except EnvError:
            continue  # caught mid-write; look again
        if record is None or record.get("released"):
            return
        if record.get("watchdog_pid") not in (None, os.getpid()):
            return
        if not owner_alive(record):
            print(f"lifecycle watchdog: owner {record.get('owner_pid')} is gone, cleaning up "
                  f"{state_dir}", file=sys.stderr, flush=True)
            clean_up(state_dir, record)
            return


def reap(parent, skip=None):
    """Cleans up every zkr-* directory in parent whose owner and watchdog are both gone."""
    try:
        entries = sorted(os.listdir(parent))
    except OSError:
        return []
    reaped = []
    for entry in entries:
        path = os.path.join(parent, entry)
        if not entry.startswith(ORPHAN_PREFIX) or path == skip:
            continue
        try:
            record = read_owner(path)
        except EnvError:
            continue
        if record is None or record.get("released") or owner_alive(record) \
                or watchdog_alive(record):
            continue
        try:
            clean_up(path, record)
            reaped.append(path)
        except (EnvError, OSError) as e:
            print(f"lifecycle reaper: {path}: {e}", file=sys.stderr)
    return reaped


def main(argv):
    parser = argparse.ArgumentParser(description="Managed directories of testenv.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("release", help="stop, end the watchdog, remove the directory")
    p.add_argument("--dir", required=True)
    p.add_argument("--keep", action="store_true", help="keep the directory (its logs)")
    p = sub.add_parser("reap", help="clean up orphan zkr-* directories")
    p.add_argument("--parent", required=True)
    p = sub.add_parser("watchdog", help=argparse.SUPPRESS)
    p.add_argument("--dir", required=True)
    args = parser.parse_args(argv)
    try:
        if args.command == "release":
            release(os.path.abspath(args.dir), args.keep)
        elif args.command == "reap":
            for path in reap(os.path.abspath(args.parent)):
                print(f"removed {path}")
        else:
            watch(os.path.abspath(args.dir))
    except EnvError as e:
        print(f"lifecycle: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
