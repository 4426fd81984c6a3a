#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Start and stop a throw-away PostgreSQL server for the tests, from Debian's packages, without
systemd and without touching any cluster that pg_ctlcluster manages.

Everything lives in one state directory: the cluster (data/), the unix socket (socket/), the
server's log (postgres.log), state.json and conninfo (the connection URI). The server listens on
127.0.0.1 and on a socket in the state directory, on a port chosen at run time, with password
authentication (a random password, written only into conninfo and state.json).

initdb and postgres refuse to run as root. Run as root (as CI does), the server runs as an
unprivileged user (--user, default nobody) that owns the state directory; run as anyone else, it
runs as the caller. Only the postmaster recorded in state.json, by pid and start time
(lifecycle.py), and only while it runs, is ever signalled.

With --owner-pid, the directory is owned by that process (lifecycle.py): a watchdog stops the
server once it is gone (and, with --remove-dir, removes the state directory), so a test killed by a
timeout leaves nothing behind.

  pgenv.py check                        prints why no server can be started here (nothing if it can)
  pgenv.py start --dir DIR [--owner-pid PID [--remove-dir]] [--user NAME] [--timeout S]
  pgenv.py stop --dir DIR
  pgenv.py status --dir DIR
"""

import argparse
import glob
import os
import pwd
import secrets
import signal
import stat
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lifecycle  # noqa: E402  (same directory: the one lifecycle of every managed process)
import zkenv  # noqa: E402  (command plumbing shared by the testenv tools)

from lifecycle import EnvError  # noqa: E402

SUPERUSER = "zkr"
DATABASE = "postgres"
START_ATTEMPTS = 3
READY_TIMEOUT_S = 30.0
STOP_GRACE_S = 10.0
DEFAULT_USER_AS_ROOT = "nobody"


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
    lifecycle.launch(state, argv, state["log"], "postgres", cwd=state["dir"],
                     env={"PATH": "/usr/bin:/bin", "LC_ALL": "C"}, **as_user(state))


def ready(state):
    result = subprocess.run([os.path.join(state["bin_dir"], "pg_isready"), "-q", "-h", "127.0.0.1",
                             "-p", str(state["port"]), "-U", SUPERUSER, "-d", DATABASE, "-t", "1"],
                            stdin=subprocess.DEVNULL, capture_output=True)
    return result.returncode == 0


def stop_server(state):
    """SIGINT is PostgreSQL's fast shutdown (running transactions are rolled back); KILL after the
    grace period."""
    lifecycle.stop([state], lambda _: "postgres", STOP_GRACE_S, term=signal.SIGINT)


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
    previous = lifecycle.load_state(state_dir)
    if previous is not None:
        if lifecycle.running(previous):
            raise EnvError(f"{state_dir} already has a running server (pid {previous['pid']}); "
                           f"run 'pgenv.py stop --dir {state_dir}' first")
        raise EnvError(f"{state_dir} holds an earlier server's state: give an empty directory")
    uid, gid, user = server_user(args.user)
    check_reachable(state_dir, uid)
    if args.owner_pid:
        lifecycle.own(state_dir, args.owner_pid, zkenv.stop_command("pgenv.py", state_dir),
                      args.remove_dir)
    os.chown(state_dir, uid, gid)
    os.chmod(state_dir, 0o700)
    log = os.path.join(state_dir, "postgres.log")
    state = {
        "dir": state_dir, "bin_dir": bin_dir(), "uid": uid, "gid": gid, "user": user, "pid": None,
        "start": None, "port": None, "password": secrets.token_hex(16),
        "data_dir": os.path.join(state_dir, "data"), "socket_dir": os.path.join(state_dir, "socket"),
        "log": log, "logs": [log],
    }
    os.makedirs(state["socket_dir"], mode=0o700)
    os.chown(state["socket_dir"], uid, gid)
    password_file = os.path.join(state_dir, "initdb-password")
    with open(os.open(password_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
        f.write(state["password"] + "\n")
    os.chown(password_file, uid, gid)
    lifecycle.save_state(state_dir, state)
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

    def attempt():
        state["port"] = lifecycle.free_ports(1)[0]
        launch_server(state)
        lifecycle.save_state(state_dir, state)
        lifecycle.wait_ready([state], lambda: None if ready(state) else "postgres does not accept "
                             "connections", args.timeout, lambda _: "postgres", poll_s=0.05)

    def clean_up():
        try:
            stop_server(state)
        finally:
            lifecycle.save_state(state_dir, state)

    lifecycle.start_with_retries(state_dir, attempt, clean_up, START_ATTEMPTS)
    lifecycle.save_state(state_dir, state)
    conninfo = os.path.join(state_dir, "conninfo")
    with open(os.open(conninfo, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
        f.write(uri(state) + "\n")
    print(uri(state), flush=True)
    print(f"pid {state['pid']}", flush=True)


def command_stop(args):
    state_dir = os.path.abspath(args.dir)
    state = lifecycle.load_state(state_dir)
    if state is None:
        print(f"pgenv: nothing to stop in {state_dir} (no state.json)", file=sys.stderr)
        return 0
    try:
        stop_server(state)
    finally:
        lifecycle.save_state(state_dir, state)
    return 0


def command_status(args):
    state = lifecycle.require_state(os.path.abspath(args.dir), "server")
    alive = lifecycle.running(state)
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
    sub.add_parser("stop", help="stop the server").set_defaults(handler=command_stop)
    sub.add_parser("status", help="one line").set_defaults(handler=command_status)
    for name, p in sub.choices.items():
        if name != "check":
            p.add_argument("--dir", required=True, help="state directory")

    args = parser.parse_args(argv)
    return zkenv.run_command("pgenv", args.handler, args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
