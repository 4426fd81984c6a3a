#!/usr/bin/python3
"""Start and stop throw-away ZooKeeper servers for the tests, without systemd.

Everything a run needs lives in one state directory: a zoo.cfg, data dir and log per server, a
log4j configuration, state.json (pids, ports, config paths) and connect_string. Servers listen on
127.0.0.1 only, on ports chosen at run time, and run in their own session so that the test runner
killing its process group does not take them down. Only pids recorded in state.json and whose
command line still names this state directory's zookeeper config are ever signalled.

Server indices on the command line start at 0 (server I has myid I+1).

With --owner-pid, a small watchdog process (in its own session too) stops the cluster once that
process is gone, so a test binary killed by a timeout does not leave servers behind.

  zkenv.py start --servers N --dir DIR [--tick-ms 100] [--sync-limit 10] [--init-limit 20]
                 [--max-heap-mb 128] [--owner-pid PID]
  zkenv.py stop --dir DIR
  zkenv.py status|leader --dir DIR
  zkenv.py kill|stop-server|start-server|freeze|thaw I --dir DIR
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

ZOOKEEPER_JAR = "/usr/share/java/zookeeper.jar"
# The jar's manifest names its other dependencies; the slf4j binding and log4j are not among them.
LOGGING_JARS = ["/usr/share/java/slf4j-log4j12.jar", "/usr/share/java/log4j-1.2.jar"]
JAVA = "/usr/bin/java"
DEFAULT_MAX_HEAP_MB = 128
JVM_FLAGS = ["-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto"]
STANDALONE_MAIN = "org.apache.zookeeper.server.ZooKeeperServerMain"
QUORUM_MAIN = "org.apache.zookeeper.server.quorum.QuorumPeerMain"

START_ATTEMPTS = 3
READY_TIMEOUT_S = 60.0
STOP_GRACE_S = 10.0
FOUR_LETTER_TIMEOUT_S = 1.0

LOG4J_PROPERTIES = """\
# Written by zkenv.py: every server logs to the file named by -Dzkenv.log.file, never the console.
log4j.rootLogger=INFO, FILE
log4j.appender.FILE=org.apache.log4j.FileAppender
log4j.appender.FILE.File=${zkenv.log.file}
log4j.appender.FILE.Append=true
log4j.appender.FILE.layout=org.apache.log4j.PatternLayout
log4j.appender.FILE.layout.ConversionPattern=%d{ISO8601} %-5p [%t:%C{1}@%L] - %m%n
"""


class EnvError(Exception):
    """A failure with a message meant for the person running the tests."""


class PortClash(EnvError):
    """A server could not bind a port chosen for it: the whole start is retried."""


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


def require_state(state_dir):
    state = load_state(state_dir)
    if state is None:
        raise EnvError(f"no cluster recorded in {state_dir} (missing state.json)")
    return state


def save_state(state_dir, state):
    temporary = state_path(state_dir) + ".tmp"
    with open(temporary, "w") as f:
        json.dump(state, f, indent=2)
        f.write("\n")
    os.replace(temporary, state_path(state_dir))


def connect_string(state):
    return ",".join(f"127.0.0.1:{s['client_port']}" for s in state["servers"])


# ---------------------------------------------------------------------------------------------
# Processes


def process_is_ours(pid, cfg):
    """True if pid is alive (not a zombie) and its command line is a zookeeper server on cfg."""
    if not pid:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
        # The state letter follows the parenthesised command name, which may itself hold spaces.
        if stat[stat.rindex(")") + 2] in "ZX":
            return False
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except (OSError, ValueError, IndexError):
        return False
    text = b" ".join(argv).decode(errors="replace")
    return "zookeeper" in text and cfg in [a.decode(errors="replace") for a in argv]


def process_start_time(pid):
    """The start time of pid in clock ticks since boot (tells a pid's reuse apart), or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
        fields = stat[stat.rindex(")") + 2:].split()
        if fields[0] in "ZX":
            return None
        return int(fields[19])
    except (OSError, ValueError, IndexError):
        return None


def child_exited(server):
    """True once a server this process launched has exited. Asks the kernel (waitpid) rather than
    /proc: right after a vfork+exec returns, /proc/PID/cmdline can still be empty (the new argv is
    set up after the parent is released), so a healthy server looked "exited" on a loaded machine."""
    try:
        pid, _ = os.waitpid(server["pid"], os.WNOHANG)
        return pid != 0
    except ChildProcessError:  # not our child after all: fall back to /proc
        return not process_is_ours(server["pid"], server["cfg"])


def watchdog_is_ours(pid, state_dir):
    if not pid or pid == os.getpid():
        return False
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = [a.decode(errors="replace") for a in f.read().split(b"\0")]
    except OSError:
        return False
    return any(a.endswith("zkenv.py") for a in argv) and "watchdog" in argv and state_dir in argv


def end_watchdog(state_dir, state):
    pid = state.get("watchdog_pid")
    if watchdog_is_ours(pid, state_dir):
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    state["watchdog_pid"] = None


def signal_if_ours(server, sig):
    pid = server.get("pid")
    if not process_is_ours(pid, server["cfg"]):
        return False
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return False
    return True


def wait_gone(server, timeout_s):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not process_is_ours(server.get("pid"), server["cfg"]):
            return True
        time.sleep(0.05)
    return not process_is_ours(server.get("pid"), server["cfg"])


def stop_server_process(server, grace_s=STOP_GRACE_S):
    """TERM (and CONT, in case it is frozen), then KILL after the grace period."""
    if not signal_if_ours(server, signal.SIGTERM):
        server["pid"] = None
        return
    signal_if_ours(server, signal.SIGCONT)
    if not wait_gone(server, grace_s):
        signal_if_ours(server, signal.SIGKILL)
        if not wait_gone(server, 5.0):
            raise EnvError(f"server {server['index']} (pid {server['pid']}) survived SIGKILL")
    server["pid"] = None


def kill_server_process(server):
    """SIGKILL; killing a server that is not running is an error (a test meant another one)."""
    if not signal_if_ours(server, signal.SIGKILL):
        server["pid"] = None
        raise EnvError(f"server {server['index']} is not running: nothing to kill")
    signal_if_ours(server, signal.SIGCONT)
    if not wait_gone(server, 5.0):
        raise EnvError(f"server {server['index']} (pid {server['pid']}) survived SIGKILL")
    server["pid"] = None


def check_installation():
    for path in [JAVA, ZOOKEEPER_JAR] + LOGGING_JARS:
        if not os.path.exists(path):
            raise EnvError(f"{path} is missing: install the Debian packages zookeeper and "
                           f"openjdk-17-jre-headless (and liblog4j1.2-java, libslf4j-java)")


def launch_server(state_dir, state, server):
    classpath = ":".join([ZOOKEEPER_JAR] + LOGGING_JARS + [os.path.join(state_dir, "conf")])
    main = STANDALONE_MAIN if len(state["servers"]) == 1 else QUORUM_MAIN
    max_heap_mb = state.get("max_heap_mb", DEFAULT_MAX_HEAP_MB)
    argv = [JAVA, f"-Xmx{max_heap_mb}m"] + JVM_FLAGS + [
        f"-Dzkenv.log.file={server['log']}",
        f"-Dlog4j.configuration=file:{os.path.join(state_dir, 'conf', 'log4j.properties')}",
        "-Dzookeeper.jmx.log4j.disable=true",
        "-cp", classpath, main, server["cfg"],
    ]
    try:
        with open(server["console"], "ab") as console, open(os.devnull, "rb") as devnull:
            process = subprocess.Popen(argv, stdin=devnull, stdout=console, stderr=console,
                                       start_new_session=True, close_fds=True)
    except OSError as e:
        raise EnvError(f"cannot start server {server['index']}: {e}")
    server["pid"] = process.pid
    # Popen would warn on garbage collection of a still-running child: we hand it over on purpose.
    process.returncode = 0


# ---------------------------------------------------------------------------------------------
# Talking to servers


def four_letter(port, command, timeout_s=FOUR_LETTER_TIMEOUT_S):
    """Sends a four-letter command and returns the reply, or None if the server does not answer."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as sock:
            sock.sendall(command.encode())
            chunks = []
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                chunks.append(chunk)
            return b"".join(chunks).decode(errors="replace")
    except OSError:
        return None


def server_mode(port):
    """'leader', 'follower', 'standalone', or None if not serving."""
    reply = four_letter(port, "srvr")
    if not reply:
        return None
    for line in reply.splitlines():
        if line.startswith("Mode:"):
            return line.split(":", 1)[1].strip()
    return None


def find_leader(state):
    """Index of the leader (or the standalone server), -1 if none answers as one."""
    for server in state["servers"]:
        if server.get("pid") and server_mode(server["client_port"]) in ("leader", "standalone"):
            return server["index"]
    return -1


def log_mentions_bind_failure(server):
    for path in (server["log"], server["console"]):
        try:
            with open(path, errors="replace") as f:
                text = f.read()
        except OSError:
            continue
        if "Address already in use" in text or "BindException" in text:
            return True
    return False


def log_tail(path, lines=15):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return ""


def wait_ready(state, servers, timeout_s):
    """Waits until each of `servers` answers srvr and the cluster has a leader (or standalone)."""
    deadline = time.monotonic() + timeout_s
    while True:
        pending = []
        for server in servers:
            if child_exited(server):
                if log_mentions_bind_failure(server):
                    raise PortClash(f"server {server['index']} could not bind its ports")
                raise EnvError(
                    f"server {server['index']} (pid {server['pid']}) exited during start; "
                    f"log {server['log']}:\n{log_tail(server['log'])}{log_tail(server['console'])}")
            if server_mode(server["client_port"]) is None:
                pending.append(server["index"])
        if not pending and find_leader(state) >= 0:
            return
        if time.monotonic() >= deadline:
            if pending:
                what = "servers " + ", ".join(map(str, pending)) + " do not answer srvr"
            else:
                what = "no server reports itself leader"
            for server in servers:
                if log_mentions_bind_failure(server):
                    raise PortClash(f"server {server['index']} could not bind its ports")
            raise EnvError(f"cluster not ready after {timeout_s:.0f} s: {what} "
                           f"(logs in {os.path.dirname(servers[0]['log'])}/..)")
        time.sleep(0.1)


# ---------------------------------------------------------------------------------------------
# Commands


def free_ports(count):
    """Ports the kernel just handed out on 127.0.0.1. Held together so they are distinct."""
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


def write_config(state_dir, state, args):
    servers = state["servers"]
    for server in servers:
        server_dir = os.path.dirname(server["cfg"])
        os.makedirs(server["data_dir"], exist_ok=True)
        lines = [
            f"tickTime={args.tick_ms}",
            f"initLimit={args.init_limit}",
            f"syncLimit={args.sync_limit}",
            "minSessionTimeout=400",
            "maxSessionTimeout=60000",
            f"dataDir={server['data_dir']}",
            f"clientPort={server['client_port']}",
            "clientPortAddress=127.0.0.1",
            "admin.enableServer=false",
            "4lw.commands.whitelist=*",
            # Unbounded per-host connections: every client of every test comes from 127.0.0.1.
            "maxClientCnxns=0",
        ]
        if len(servers) > 1:
            for peer in servers:
                lines.append(f"server.{peer['index'] + 1}=127.0.0.1:{peer['quorum_port']}:"
                             f"{peer['election_port']}")
            with open(os.path.join(server["data_dir"], "myid"), "w") as f:
                f.write(f"{server['index'] + 1}\n")
        with open(server["cfg"], "w") as f:
            f.write("\n".join(lines) + "\n")
        assert os.path.dirname(server["cfg"]) == server_dir


def new_state(state_dir, args):
    ports = free_ports(3 * args.servers)
    servers = []
    for index in range(args.servers):
        server_dir = os.path.join(state_dir, f"server-{index}")
        servers.append({
            "index": index,
            "pid": None,
            "client_port": ports[3 * index],
            "quorum_port": ports[3 * index + 1],
            "election_port": ports[3 * index + 2],
            "cfg": os.path.join(server_dir, "zoo.cfg"),
            "data_dir": os.path.join(server_dir, "data"),
            "log": os.path.join(server_dir, "zookeeper.log"),
            "console": os.path.join(server_dir, "console.log"),
        })
    return {"tick_ms": args.tick_ms, "sync_limit": args.sync_limit, "init_limit": args.init_limit,
            "max_heap_mb": args.max_heap_mb,
            "servers": servers}


def running_servers(state):
    return [s for s in state["servers"] if process_is_ours(s.get("pid"), s["cfg"])]


def command_start(args):
    state_dir = os.path.abspath(args.dir)
    if args.servers < 1:
        raise EnvError(f"--servers must be at least 1, not {args.servers}")
    if args.tick_ms < 1:
        raise EnvError(f"--tick-ms must be positive, not {args.tick_ms}")
    if args.max_heap_mb < 16:
        raise EnvError(f"--max-heap-mb must be at least 16, not {args.max_heap_mb}")
    check_installation()
    os.makedirs(state_dir, exist_ok=True)
    previous = load_state(state_dir)
    if previous is not None and running_servers(previous):
        pids = ", ".join(str(s["pid"]) for s in running_servers(previous))
        raise EnvError(f"{state_dir} already has a running cluster (pids {pids}); "
                       f"run 'zkenv.py stop --dir {state_dir}' first")
    if previous is not None:
        # A watchdog left from an earlier run would otherwise stop the new cluster.
        end_watchdog(state_dir, previous)
    owner_start = None
    if args.owner_pid:
        owner_start = process_start_time(args.owner_pid)
        if owner_start is None:
            raise EnvError(f"--owner-pid {args.owner_pid} is not a running process")

    conf_dir = os.path.join(state_dir, "conf")
    os.makedirs(conf_dir, exist_ok=True)
    with open(os.path.join(conf_dir, "log4j.properties"), "w") as f:
        f.write(LOG4J_PROPERTIES)

    for attempt in range(1, START_ATTEMPTS + 1):
        # A fresh start: the data of an earlier run in this directory is ours to drop.
        for entry in os.listdir(state_dir):
            if entry.startswith("server-"):
                shutil.rmtree(os.path.join(state_dir, entry), ignore_errors=True)
        for stale in ("connect_string",):
            try:
                os.remove(os.path.join(state_dir, stale))
            except FileNotFoundError:
                pass
        state = new_state(state_dir, args)
        write_config(state_dir, state, args)
        try:
            for server in state["servers"]:
                launch_server(state_dir, state, server)
            save_state(state_dir, state)
            wait_ready(state, state["servers"], args.timeout)
        except BaseException as e:
            for server in state["servers"]:
                try:
                    kill_server_process(server)
                except EnvError:
                    pass
            save_state(state_dir, state)
            if isinstance(e, PortClash) and attempt < START_ATTEMPTS:
                continue
            raise
        break

    if args.owner_pid:
        try:
            launch_watchdog(state_dir, state, args.owner_pid, owner_start)
        except BaseException:
            stop_cluster(state_dir, state)
            raise
    save_state(state_dir, state)
    with open(os.path.join(state_dir, "connect_string"), "w") as f:
        f.write(connect_string(state) + "\n")
    print(connect_string(state), flush=True)


def launch_watchdog(state_dir, state, owner_pid, owner_start):
    argv = [sys.executable, os.path.abspath(__file__), "watchdog", "--dir", state_dir,
            "--owner-pid", str(owner_pid), "--owner-start", str(owner_start)]
    try:
        with open(os.path.join(state_dir, "watchdog.log"), "ab") as log, \
                open(os.devnull, "rb") as devnull:
            process = subprocess.Popen(argv, stdin=devnull, stdout=log, stderr=log,
                                       start_new_session=True, close_fds=True)
    except OSError as e:
        raise EnvError(f"cannot start the watchdog: {e}")
    process.returncode = 0  # see launch_server
    state["watchdog_pid"] = process.pid


def command_watchdog(args):
    """Stops the cluster once the owner process is gone; ends when the state directory does."""
    state_dir = os.path.abspath(args.dir)
    while True:
        time.sleep(0.5)
        try:
            state = load_state(state_dir)
        except EnvError:
            continue  # caught mid-write; look again
        if state is None:
            return  # the directory was removed
        recorded = state.get("watchdog_pid")
        if recorded is not None and recorded != os.getpid():
            return  # restarted with another watchdog
        if recorded is None and not running_servers(state):
            return  # stopped by someone else
        if process_start_time(args.owner_pid) != args.owner_start:
            print(f"zkenv watchdog: owner {args.owner_pid} is gone, stopping the cluster",
                  file=sys.stderr, flush=True)
            stop_cluster(state_dir, state)
            return


def stop_cluster(state_dir, state):
    end_watchdog(state_dir, state)
    # Signal all first so that an ensemble goes down together, then wait for each.
    for server in state["servers"]:
        if signal_if_ours(server, signal.SIGTERM):
            signal_if_ours(server, signal.SIGCONT)
    failures = []
    for server in state["servers"]:
        try:
            stop_server_process(server)
        except EnvError as e:
            failures.append(str(e))
    save_state(state_dir, state)
    if failures:
        raise EnvError("; ".join(failures))


def command_stop(args):
    state_dir = os.path.abspath(args.dir)
    state = load_state(state_dir)
    if state is None:
        print(f"zkenv: nothing to stop in {state_dir} (no state.json)", file=sys.stderr)
        return
    stop_cluster(state_dir, state)


def server_by_index(state, index):
    servers = state["servers"]
    if not 0 <= index < len(servers):
        raise EnvError(f"server index {index} out of range: the cluster has {len(servers)} "
                       f"servers, numbered 0..{len(servers) - 1}")
    return servers[index]


def command_status(args):
    state = require_state(os.path.abspath(args.dir))
    for server in state["servers"]:
        alive = process_is_ours(server.get("pid"), server["cfg"])
        mode = server_mode(server["client_port"]) if alive else None
        print(f"{server['index']} pid={server['pid'] if alive else '-'} "
              f"address=127.0.0.1:{server['client_port']} "
              f"state={'running' if alive else 'stopped'} mode={mode or '-'}")


def command_leader(args):
    print(find_leader(require_state(os.path.abspath(args.dir))))


def command_on_server(args):
    state_dir = os.path.abspath(args.dir)
    state = require_state(state_dir)
    server = server_by_index(state, args.index)
    if args.command == "kill":
        kill_server_process(server)
    elif args.command == "stop-server":
        stop_server_process(server)
    elif args.command == "start-server":
        if process_is_ours(server.get("pid"), server["cfg"]):
            raise EnvError(f"server {args.index} is already running (pid {server['pid']})")
        launch_server(state_dir, state, server)
        save_state(state_dir, state)
        # Only this server must answer; a lone ensemble member can serve only once it has a quorum.
        deadline = time.monotonic() + args.timeout
        while server_mode(server["client_port"]) is None:
            if child_exited(server):
                raise EnvError(f"server {args.index} exited on start; log {server['log']}:\n"
                               f"{log_tail(server['log'])}")
            if time.monotonic() >= deadline:
                if args.no_wait_quorum:
                    break
                raise EnvError(f"server {args.index} does not answer srvr after "
                               f"{args.timeout:.0f} s (no quorum?)")
            time.sleep(0.1)
    elif args.command == "freeze":
        if not signal_if_ours(server, signal.SIGSTOP):
            raise EnvError(f"server {args.index} is not running")
    elif args.command == "thaw":
        if not signal_if_ours(server, signal.SIGCONT):
            raise EnvError(f"server {args.index} is not running")
    save_state(state_dir, state)


def main(argv):
    parser = argparse.ArgumentParser(description="Throw-away ZooKeeper servers for tests.")
    sub = parser.add_subparsers(dest="command", required=True)

    start = sub.add_parser("start", help="start N servers and wait until they serve")
    start.add_argument("--servers", type=int, default=1)
    start.add_argument("--tick-ms", type=int, default=100)
    start.add_argument("--sync-limit", type=int, default=10)
    start.add_argument("--init-limit", type=int, default=20)
    start.add_argument("--max-heap-mb", type=int, default=DEFAULT_MAX_HEAP_MB,
                       help="each server's Java heap limit (-Xmx)")
    start.add_argument("--timeout", type=float, default=READY_TIMEOUT_S,
                       help="seconds to wait for the cluster to serve")
    start.add_argument("--owner-pid", type=int, default=0,
                       help="stop the cluster when this process ends")
    start.set_defaults(handler=command_start)

    watchdog = sub.add_parser("watchdog", help=argparse.SUPPRESS)
    watchdog.add_argument("--owner-pid", type=int, required=True)
    watchdog.add_argument("--owner-start", type=int, required=True)
    watchdog.set_defaults(handler=command_watchdog)

    for name, handler, text in (("stop", command_stop, "stop every recorded server"),
                                ("status", command_status, "one line per server"),
                                ("leader", command_leader, "index of the leader, -1 if none")):
        p = sub.add_parser(name, help=text)
        p.set_defaults(handler=handler)

    for name, text in (("kill", "SIGKILL one server"),
                       ("stop-server", "stop one server (TERM, then KILL)"),
                       ("start-server", "start a stopped server again on its ports"),
                       ("freeze", "SIGSTOP one server"),
                       ("thaw", "SIGCONT one server")):
        p = sub.add_parser(name, help=text)
        p.add_argument("index", type=int, help="server index, from 0")
        p.add_argument("--timeout", type=float, default=READY_TIMEOUT_S)
        p.add_argument("--no-wait-quorum", action="store_true",
                       help="start-server: do not fail if the server cannot serve yet")
        p.set_defaults(handler=command_on_server)

    for p in list(sub.choices.values()):
        p.add_argument("--dir", required=True, help="state directory")

    args = parser.parse_args(argv)
    try:
        args.handler(args)
    except EnvError as e:
        print(f"zkenv: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("zkenv: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
