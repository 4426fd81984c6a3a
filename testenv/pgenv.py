#!/usr/bin/python3
"""Start and stop a throw-away PostgreSQL server for the tests, from Debian's packages, without
systemd and without touching any cluster that pg_ctlcluster manages.

Everything lives in one state directory: the cluster (data/), the unix socket (socket/), the
server's log (postgres.log), state.json and conninfo (the connection URI). The server listens on
127.0.0.1 and on a socket in the state directory, on a port chosen at run time, with password
authentication (a random password, written only into conninfo and state.json).

initdb and postgres refuse to run as root. Run as root (as CI does), the server runs as an
unprivileged user (--user, default nobody) that owns the state directory; run as anyone else, it
runs as the caller. Only the pid recorded in state.json, and only while its command line still
names this state directory's data/, is ever signalled.

With --owner-pid, a small watchdog process stops the server once that process is gone (and, with
--remove-dir, removes the state directory), so a test killed by a timeout leaves nothing behind.

  pgenv.py check                        prints why no server can be started here (nothing if it can)
  pgenv.py start --dir DIR [--owner-pid PID [--remove-dir]] [--user NAME] [--timeout S]
  pgenv.py stop --dir DIR
  pgenv.py status --dir DIR
"""

import argparse
import glob
import json
import os
import pwd
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time

SUPERUSER = "zkr"
DATABASE = "postgres"
START_ATTEMPTS = 3
READY_TIMEOUT_S = 30.0
STOP_GRACE_S = 10.0
DEFAULT_USER_AS_ROOT = "nobody"


class EnvError(Exception):
    """A failure with a message meant for the person running the tests."""


class PortClash(EnvError):
    """The server could not bind the port chosen for it: the start is retried on another."""


def bin_dir():
    """The newest /usr/lib/postgresql/N/bin holding initdb and postgres ($ZKR_PG_BINDIR wins)."""
    chosen = os.environ.get("ZKR_PG_BINDIR")
    candidates = [chosen] if chosen else sorted(
        glob.glob("/usr/lib/postgresql/*/bin"),
        key=lambda path: int(path.split("/")[-2]) if path.split("/")[-2].isdigit() else 0,
        reverse=True)
    for candidate in candidates:
        if all(os.access(os.path.join(candidate, tool), os.X_OK)
               for tool in ("initdb", "postgres", "pg_ctl", "pg_isready")):
            return candidate
    return None


def unavailable_reason():
    if bin_dir() is None:
        where = os.environ.get("ZKR_PG_BINDIR") or "/usr/lib/postgresql/*/bin"
        return (f"no PostgreSQL server binaries (initdb, postgres, pg_ctl, pg_isready) in {where}: "
                f"install the Debian package postgresql (scripts/install-deps does)")
    return ""


# ---------------------------------------------------------------------------------------------
# State directory


def state_path(state_dir):
    return os.path.join(state_dir, "state.json")


def load_state(state_dir):
    try:
        with open(state_path(state_dir)) as f:
            return json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise EnvError(f"cannot read {state_path(state_dir)}: {e}")


def save_state(state_dir, state):
    temporary = state_path(state_dir) + ".tmp"
    with open(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
        json.dump(state, f, indent=2)
        f.write("\n")
    os.replace(temporary, state_path(state_dir))


def server_user(requested):
    """(uid, gid, name) the server runs as: the caller, or an unprivileged user when root."""
    if os.geteuid() != 0:
        if requested and requested != pwd.getpwuid(os.geteuid()).pw_name:
            raise EnvError(f"--user {requested} needs root; running as "
                           f"{pwd.getpwuid(os.geteuid()).pw_name}")
        return os.geteuid(), os.getegid(), pwd.getpwuid(os.geteuid()).pw_name
    name = requested or DEFAULT_USER_AS_ROOT
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise EnvError(f"user {name} does not exist: PostgreSQL refuses to run as root, so a "
                       f"server started by root runs as an unprivileged user (--user)")
    if entry.pw_uid == 0:
        raise EnvError(f"--user {name} is root: PostgreSQL refuses to run as root")
    return entry.pw_uid, entry.pw_gid, name


def check_reachable(state_dir, uid):
    """The server user must be able to reach the state directory through each of its parents."""
    path = os.path.dirname(state_dir)
    while True:
        info = os.stat(path)
        searchable = info.st_mode & stat.S_IXOTH or (info.st_uid == uid and info.st_mode & stat.S_IXUSR)
        if not searchable:
            raise EnvError(f"{path} is not searchable by uid {uid}, which the server runs as: "
                           f"put the state directory elsewhere (for example under /tmp)")
        if path == "/":
            return
        path = os.path.dirname(path)


def as_user(state):
    """Popen arguments that run a program as the server user (nothing to change when not root)."""
    if os.geteuid() != 0:
        return {}
    return {"user": state["uid"], "group": state["gid"], "extra_groups": []}


def run_as_server_user(state, argv, what):
    environment = {"PATH": "/usr/bin:/bin", "LC_ALL": "C", "HOME": state["dir"]}
    result = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                            env=environment, cwd=state["dir"], **as_user(state))
    if result.returncode != 0:
        raise EnvError(f"{what} failed (exit {result.returncode}): "
                       f"{(result.stderr or result.stdout).strip()}")
    return result.stdout


# ---------------------------------------------------------------------------------------------
# The server process


def process_is_ours(pid, data_dir):
    """True if pid is alive (not a zombie) and is a postgres whose command line names data_dir."""
    if not pid:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
        if text[text.rindex(")") + 2] in "ZX":
            return False
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = [a.decode(errors="replace") for a in f.read().split(b"\0")]
    except (OSError, ValueError, IndexError):
        return False
    return bool(argv) and argv[0].endswith("/postgres") and data_dir in argv


def process_start_time(pid):
    """The start time of pid in clock ticks since boot (tells a reused pid apart), or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
        fields = text[text.rindex(")") + 2:].split()
        if fields[0] in "ZX":
            return None
        return int(fields[19])
    except (OSError, ValueError, IndexError):
        return None


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def log_tail(path, lines=15):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return ""


def uri(state):
    return (f"postgresql://{SUPERUSER}:{state['password']}@127.0.0.1:{state['port']}/{DATABASE}"
            f"?connect_timeout=10")


def launch_server(state):
    argv = [os.path.join(state["bin_dir"], "postgres"), "-D", state["data_dir"],
            "-c", f"port={state['port']}",
            "-c", "listen_addresses=127.0.0.1",
            "-c", f"unix_socket_directories={state['socket_dir']}",
            "-c", "max_connections=20",
            "-c", "shared_buffers=16MB",
            "-c", "logging_collector=off"]
    try:
        with open(state["log"], "ab") as log, open(os.devnull, "rb") as devnull:
            process = subprocess.Popen(argv, stdin=devnull, stdout=log, stderr=log, cwd=state["dir"],
                                       env={"PATH": "/usr/bin:/bin", "LC_ALL": "C"},
                                       start_new_session=True, close_fds=True, **as_user(state))
    except OSError as e:
        raise EnvError(f"cannot start postgres: {e}")
    state["pid"] = process.pid
    process.returncode = 0  # handed over on purpose: no warning when the Popen object goes


def child_exited(state):
    try:
        pid, _ = os.waitpid(state["pid"], os.WNOHANG)
        return pid != 0
    except ChildProcessError:
        return not process_is_ours(state["pid"], state["data_dir"])


def ready(state):
    result = subprocess.run([os.path.join(state["bin_dir"], "pg_isready"), "-q", "-h", "127.0.0.1",
                             "-p", str(state["port"]), "-U", SUPERUSER, "-d", DATABASE, "-t", "1"],
                            stdin=subprocess.DEVNULL, capture_output=True)
    return result.returncode == 0


def wait_ready(state, timeout_s):
    deadline = time.monotonic() + timeout_s
    while not ready(state):
        if child_exited(state):
            text = log_tail(state["log"])
            if "could not bind" in text or "Address already in use" in text:
                raise PortClash(f"port {state['port']} is taken")
            raise EnvError(f"postgres (pid {state['pid']}) exited during start; {state['log']}:\n{text}")
        if time.monotonic() >= deadline:
            raise EnvError(f"postgres does not accept connections after {timeout_s:.0f} s; "
                           f"{state['log']}:\n{log_tail(state['log'])}")
        time.sleep(0.05)


def stop_server(state):
    """pg_ctl stop (fast: running transactions are rolled back), then SIGKILL our pid if needed."""
    pid = state.get("pid")
    if not process_is_ours(pid, state["data_dir"]):
        state["pid"] = None
        return
    os.kill(pid, signal.SIGCONT)  # in case a test froze it
    try:
        run_as_server_user(state, [os.path.join(state["bin_dir"], "pg_ctl"), "stop", "-D",
                                   state["data_dir"], "-m", "fast", "-w", "-t", str(int(STOP_GRACE_S))],
                           "pg_ctl stop")
    except EnvError as e:
        print(f"pgenv: {e}; killing pid {pid}", file=sys.stderr)
    if process_is_ours(pid, state["data_dir"]):
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 5.0
        while process_is_ours(pid, state["data_dir"]):
            if time.monotonic() >= deadline:
                raise EnvError(f"postgres (pid {pid}) survived SIGKILL")
            time.sleep(0.05)
    state["pid"] = None


# ---------------------------------------------------------------------------------------------
# Commands


def command_check(_args):
    reason = unavailable_reason()
    if reason:
        print(reason)
        return 1
    return 0


def command_start(args):
    state_dir = os.path.abspath(args.dir)
    reason = unavailable_reason()
    if reason:
        raise EnvError(reason)
    if args.remove_dir and not args.owner_pid:
        raise EnvError("--remove-dir needs --owner-pid")
    os.makedirs(state_dir, mode=0o700, exist_ok=True)
    previous = load_state(state_dir)
    if previous is not None:
        if process_is_ours(previous.get("pid"), previous["data_dir"]):
            raise EnvError(f"{state_dir} already has a running server (pid {previous['pid']}); "
                           f"run 'pgenv.py stop --dir {state_dir}' first")
        raise EnvError(f"{state_dir} holds an earlier server's state: give an empty directory")
    owner_start = None
    if args.owner_pid:
        owner_start = process_start_time(args.owner_pid)
        if owner_start is None:
            raise EnvError(f"--owner-pid {args.owner_pid} is not a running process")
    uid, gid, user = server_user(args.user)
    check_reachable(state_dir, uid)
    os.chown(state_dir, uid, gid)
    os.chmod(state_dir, 0o700)
    state = {
        "dir": state_dir, "bin_dir": bin_dir(), "uid": uid, "gid": gid, "user": user, "pid": None,
        "port": None, "password": secrets.token_hex(16),
        "data_dir": os.path.join(state_dir, "data"), "socket_dir": os.path.join(state_dir, "socket"),
        "log": os.path.join(state_dir, "postgres.log"), "watchdog_pid": None,
    }
    for directory in (state["socket_dir"],):
        os.makedirs(directory, mode=0o700)
        os.chown(directory, uid, gid)
    password_file = os.path.join(state_dir, "initdb-password")
    with open(os.open(password_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
        f.write(state["password"] + "\n")
    os.chown(password_file, uid, gid)
    save_state(state_dir, state)
    try:
        # --no-sync: a throw-away cluster need not survive a power cut; the server itself runs
        # with its defaults (fsync on).
        run_as_server_user(state, [os.path.join(state["bin_dir"], "initdb"), "-D", state["data_dir"],
                                   "-U", SUPERUSER, f"--pwfile={password_file}",
                                   "--auth=scram-sha-256", "--encoding=UTF8", "--locale=C",
                                   "--no-sync", "--no-instructions"], "initdb")
    finally:
        os.remove(password_file)
    with open(os.open(state["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "w"):
        pass
    os.chown(state["log"], uid, gid)

    for attempt in range(1, START_ATTEMPTS + 1):
        state["port"] = free_port()
        try:
            launch_server(state)
            save_state(state_dir, state)
            wait_ready(state, args.timeout)
        except BaseException as e:
            try:
                stop_server(state)
            except EnvError:
                pass
            save_state(state_dir, state)
            if isinstance(e, PortClash) and attempt < START_ATTEMPTS:
                continue
            raise
        break

    if args.owner_pid:
        try:
            launch_watchdog(state_dir, state, args.owner_pid, owner_start, args.remove_dir)
        except BaseException:
            stop_server(state)
            save_state(state_dir, state)
            raise
    save_state(state_dir, state)
    conninfo = os.path.join(state_dir, "conninfo")
    with open(os.open(conninfo, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
        f.write(uri(state) + "\n")
    print(uri(state), flush=True)
    print(f"pid {state['pid']}", flush=True)


def watchdog_is_ours(pid, state_dir):
    if not pid or pid == os.getpid():
        return False
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = [a.decode(errors="replace") for a in f.read().split(b"\0")]
    except OSError:
        return False
    return any(a.endswith("pgenv.py") for a in argv) and "watchdog" in argv and state_dir in argv


def launch_watchdog(state_dir, state, owner_pid, owner_start, remove_dir):
    argv = [sys.executable, os.path.abspath(__file__), "watchdog", "--dir", state_dir,
            "--owner-pid", str(owner_pid), "--owner-start", str(owner_start)]
    if remove_dir:
        argv.append("--remove-dir")
    try:
        with open(os.devnull, "rb") as devnull:
            process = subprocess.Popen(argv, stdin=devnull, stdout=subprocess.DEVNULL,
                                       stderr=subprocess.DEVNULL, start_new_session=True,
                                       close_fds=True)
    except OSError as e:
        raise EnvError(f"cannot start the watchdog: {e}")
    process.returncode = 0
    state["watchdog_pid"] = process.pid


def command_watchdog(args):
    """Stops the server once the owner process is gone; ends when the server or directory does."""
    state_dir = os.path.abspath(args.dir)
    while True:
        time.sleep(0.5)
        try:
            state = load_state(state_dir)
        except EnvError:
            continue  # caught mid-write; look again
        if state is None:
            return
        if state.get("watchdog_pid") not in (None, os.getpid()):
            return
        if not process_is_ours(state.get("pid"), state["data_dir"]):
            return
        if process_start_time(args.owner_pid) != args.owner_start:
            stop_server(state)
            save_state(state_dir, state)
            if args.remove_dir:
                shutil.rmtree(state_dir, ignore_errors=True)
            return


def command_stop(args):
    state_dir = os.path.abspath(args.dir)
    state = load_state(state_dir)
    if state is None:
        print(f"pgenv: nothing to stop in {state_dir} (no state.json)", file=sys.stderr)
        return 0
    watchdog = state.get("watchdog_pid")
    if watchdog_is_ours(watchdog, state_dir):
        try:
            os.kill(watchdog, signal.SIGTERM)
        except ProcessLookupError:
            pass
    state["watchdog_pid"] = None
    stop_server(state)
    save_state(state_dir, state)
    return 0


def command_status(args):
    state = load_state(os.path.abspath(args.dir))
    if state is None:
        raise EnvError(f"no server recorded in {args.dir} (missing state.json)")
    alive = process_is_ours(state.get("pid"), state["data_dir"])
    print(f"pid={state['pid'] if alive else '-'} address=127.0.0.1:{state['port']} "
          f"user={state['user']} state={'running' if alive else 'stopped'}")
    return 0


def main(argv):
    parser = argparse.ArgumentParser(description="A throw-away PostgreSQL server for tests.")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("check", help="why no server can start here; nothing if it can").set_defaults(
        handler=command_check)
    start = sub.add_parser("start", help="initdb and start a server; prints its URI and pid")
    start.add_argument("--owner-pid", type=int, default=0, help="stop the server when this ends")
    start.add_argument("--remove-dir", action="store_true",
                       help="with --owner-pid: the watchdog also removes the state directory")
    start.add_argument("--user", default="", help=f"run as this user when root "
                                                  f"(default {DEFAULT_USER_AS_ROOT})")
    start.add_argument("--timeout", type=float, default=READY_TIMEOUT_S)
    start.set_defaults(handler=command_start)
    watchdog = sub.add_parser("watchdog", help=argparse.SUPPRESS)
    watchdog.add_argument("--owner-pid", type=int, required=True)
    watchdog.add_argument("--owner-start", type=int, required=True)
    watchdog.add_argument("--remove-dir", action="store_true")
    watchdog.set_defaults(handler=command_watchdog)
    sub.add_parser("stop", help="stop the server").set_defaults(handler=command_stop)
    sub.add_parser("status", help="one line").set_defaults(handler=command_status)
    for name, p in sub.choices.items():
        if name != "check":
            p.add_argument("--dir", required=True, help="state directory")

    args = parser.parse_args(argv)
    try:
        return args.handler(args) or 0
    except EnvError as e:
        print(f"pgenv: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("pgenv: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
