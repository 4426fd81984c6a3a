#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Start and stop throw-away ZooKeeper servers for the tests, without systemd.

Everything a run needs lives in one state directory: a zoo.cfg, data dir and log per server, a
log4j configuration, state.json (pids, ports, config paths) and connect_string. Servers listen on
127.0.0.1 only, on ports chosen at run time, and run in their own session so that the test runner
killing its process group does not take them down. Only a server this tool started, and only
while it runs, is ever signalled: state.json records its pid with its start time (lifecycle.py).

Server indices on the command line start at 0 (server I has myid I+1).

With --owner-pid, the directory is owned by that process (lifecycle.py): a watchdog stops the
cluster once it is gone (and with --remove-dir removes the directory), so a test binary killed by a
timeout does not leave servers behind.

  zkenv.py start --servers N --dir DIR [--tick-ms 100] [--sync-limit 10] [--init-limit 20]
                 [--max-heap-mb 128] [--owner-pid PID [--remove-dir]]
                 [--tls [--tls-client-auth none|want|need] [--tls-server-cert good|expired]
                        [--tls-protocols TLSv1.2,TLSv1.3] [--tls-cipher-suites SUITE,...]]
  zkenv.py stop --dir DIR
  zkenv.py status|leader --dir DIR
  zkenv.py kill|stop-server|start-server|freeze|thaw I --dir DIR
"""

import argparse
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lifecycle  # noqa: E402  (same directory: the one lifecycle of every managed process)

from lifecycle import EnvError  # noqa: E402

ZOOKEEPER_JAR = "/usr/share/java/zookeeper.jar"
# The jar's manifest names its other dependencies; the slf4j binding and log4j are not among them.
LOGGING_JARS = ["/usr/share/java/slf4j-log4j12.jar", "/usr/share/java/log4j-1.2.jar"]
# The Netty server (secureClientPort) needs these too; the jar's manifest names only netty-handler,
# -transport, -buffer and -common (all four from Debian's libnetty-java).
NETTY_JARS = ["/usr/share/java/netty-codec.jar", "/usr/share/java/netty-resolver.jar"]
OPENSSL = "/usr/bin/openssl"
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


# ---------------------------------------------------------------------------------------------
# State directory and server processes (their lifecycle is lifecycle.py's)


# ---------------------------------------------------------------------------------------------
# TLS (--tls): certificates made with the openssl CLI at start, in STATEDIR/tls

TLS_CLIENT_AUTH = ("none", "want", "need")
TLS_SERVER_CERTS = ("good", "expired")
TLS_PROTOCOLS = ("TLSv1.2", "TLSv1.3")


def split_list(text):
    """'a,b' -> ['a', 'b']; '' -> []."""
    return [item.strip() for item in text.split(",") if item.strip()]
# What STATEDIR/tls holds (PEM): a test CA; the server's certificate, for IP 127.0.0.1 only (so a
# client that connects as "localhost" sees a hostname mismatch); a client certificate from the same
# CA; a second CA that signed nothing the server trusts ("wrong CA"), and a client certificate it
# signed (which the server refuses); an expired server certificate.
TLS_FILES = {
    "ca": "ca.pem", "server_cert": "server.pem", "server_key": "server.key",
    "client_cert": "client.pem", "client_key": "client.key", "other_ca": "other-ca.pem",
    "other_client_cert": "other-client.pem", "expired_server_cert": "server-expired.pem",
}


def openssl(tls_dir, *arguments):
    result = subprocess.run([OPENSSL, *arguments], cwd=tls_dir, capture_output=True, text=True)
    if result.returncode != 0:
        raise EnvError(f"openssl {' '.join(arguments)} failed: {result.stderr.strip()}")


def make_certificates(tls_dir):
    """The files of TLS_FILES (and their keys), valid for a day; EC P-256 keys, which are quick."""
    os.makedirs(tls_dir, exist_ok=True)
    key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    for ca, name in (("ca", "zkr test CA"), ("other-ca", "zkr other test CA")):
        openssl(tls_dir, "req", "-x509", *key, "-keyout", f"{ca}.key", "-out", f"{ca}.pem",
                "-days", "1", "-subj", f"/CN={name}")
    with open(os.path.join(tls_dir, "server.ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
    with open(os.path.join(tls_dir, "client.ext"), "w") as f:
        f.write("extendedKeyUsage=clientAuth\n")
    for who, subject in (("server", "/CN=127.0.0.1"), ("client", "/CN=zkr test client")):
        openssl(tls_dir, "req", *key, "-keyout", f"{who}.key", "-out", f"{who}.csr", "-subj", subject)
    signed = (("server.pem", "server", "ca", "1"), ("client.pem", "client", "ca", "1"),
              # The client's key, certified by the CA the server does not trust.
              ("other-client.pem", "client", "other-ca", "1"),
              # -days -1: notAfter a day before notBefore (now), so expired from the start.
              ("server-expired.pem", "server", "ca", "-1"))
    for out, who, ca, days in signed:
        openssl(tls_dir, "x509", "-req", "-in", f"{who}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
                "-set_serial", str(int.from_bytes(os.urandom(8), "big")), "-days", days,
                "-extfile", f"{who}.ext", "-out", out)


def write_server_keystore(tls_dir, cert):
    """ZooKeeper's PEM key store: the private key, then the certificate."""
    path = os.path.join(tls_dir, "server-keystore.pem")
    with open(path, "w") as out:
        for name in ("server.key", cert):
            with open(os.path.join(tls_dir, name)) as f:
                out.write(f.read())
    return path


def tls_config_lines(tls, address="127.0.0.1"):
    """zoo.cfg lines of a server that takes clients on secureClientPort only (Netty)."""
    tls_dir = tls["dir"]
    return [
        "serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory",
        f"secureClientPortAddress={address}",
        f"ssl.keyStore.location={os.path.join(tls_dir, 'server-keystore.pem')}",
        "ssl.keyStore.type=PEM",
        f"ssl.trustStore.location={os.path.join(tls_dir, TLS_FILES['ca'])}",
        "ssl.trustStore.type=PEM",
        f"ssl.clientAuth={tls['client_auth']}",
    ] + ([f"ssl.protocol={tls['protocols'][-1]}",
          f"ssl.enabledProtocols={','.join(tls['protocols'])}"] if tls.get("protocols") else []) + \
        ([f"ssl.ciphersuites={','.join(tls['cipher_suites'])}"] if tls.get("cipher_suites") else [])


def tls_probe_context(tls):
    """For four-letter words on a TLS port: verifies nothing (the server may present the expired
    certificate on purpose), offers the client certificate (clientAuth=need asks for one)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.load_cert_chain(os.path.join(tls["dir"], TLS_FILES["client_cert"]),
                            os.path.join(tls["dir"], TLS_FILES["client_key"]))
    return context


def connect_string(state):
    return ",".join(f"127.0.0.1:{s['client_port']}" for s in state["servers"])


def server_name(server):
    return f"server {server['index']}"


def check_installation():
    for path in [JAVA, ZOOKEEPER_JAR] + LOGGING_JARS:
        if not os.path.exists(path):
            raise EnvError(f"{path} is missing: install the Debian packages zookeeper and "
                           f"openjdk-17-jre-headless (and liblog4j1.2-java, libslf4j-java)")


def check_tls_installation():
    for path in NETTY_JARS + [OPENSSL]:
        if not os.path.exists(path):
            raise EnvError(f"{path} is missing: --tls needs the Debian packages libnetty-java "
                           f"and openssl")


def server_argv(state_dir, state, server, max_heap_mb=None):
    """The JVM command line of one server (netlab.py runs the same under `ip netns exec`)."""
    netty = NETTY_JARS if state.get("tls") else []
    classpath = ":".join([ZOOKEEPER_JAR] + netty + LOGGING_JARS + [os.path.join(state_dir, "conf")])
    main = STANDALONE_MAIN if len(state["servers"]) == 1 else QUORUM_MAIN
    heap = [f"-Xmx{max_heap_mb}m"] if max_heap_mb else []
    return [JAVA] + heap + JVM_FLAGS + [
        f"-Dzkenv.log.file={server['log']}",
        f"-Dlog4j.configuration=file:{os.path.join(state_dir, 'conf', 'log4j.properties')}",
        "-Dzookeeper.jmx.log4j.disable=true",
        "-cp", classpath, main, server["cfg"],
    ]


def launch_server(state_dir, state, server):
    argv = server_argv(state_dir, state, server, state.get("max_heap_mb", DEFAULT_MAX_HEAP_MB))
    lifecycle.launch(server, argv, server["console"], server_name(server))


def write_log4j(state_dir):
    conf_dir = os.path.join(state_dir, "conf")
    os.makedirs(conf_dir, exist_ok=True)
    with open(os.path.join(conf_dir, "log4j.properties"), "w") as f:
        f.write(LOG4J_PROPERTIES)


def server_record(state_dir, index, **fields):
    server_dir = os.path.join(state_dir, f"server-{index}")
    log = os.path.join(server_dir, "zookeeper.log")
    console = os.path.join(server_dir, "console.log")
    return dict(fields, index=index, pid=None, start=None, cfg=os.path.join(server_dir, "zoo.cfg"),
                data_dir=os.path.join(server_dir, "data"), log=log, console=console,
                logs=[log, console])


# ---------------------------------------------------------------------------------------------
# Talking to servers


def four_letter(port, command, timeout_s=FOUR_LETTER_TIMEOUT_S, address="127.0.0.1", make_socket=None,
                tls_context=None):
    """Sends a four-letter command and returns the reply, or None if the server does not answer.
    make_socket() makes the socket (netlab.py makes it inside a namespace); with tls_context the
    command goes over TLS (a --tls server has no plain port)."""
    try:
        sock = make_socket() if make_socket else socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        with sock:
            sock.settimeout(timeout_s)
            sock.connect((address, port))
            if tls_context is not None:
                sock = tls_context.wrap_socket(sock)
            sock.sendall(command.encode())
            chunks = []
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                chunks.append(chunk)
            return b"".join(chunks).decode(errors="replace")
    except (OSError, ssl.SSLError):
        return None


def mode_of(reply):
    """'leader', 'follower', 'standalone' from a srvr reply, or None if not serving."""
    for line in (reply or "").splitlines():
        if line.startswith("Mode:"):
            return line.split(":", 1)[1].strip()
    return None


# The mode of a --tls server whose port takes connections and aborts every TLS handshake, closing
# it or with an alert (its TLS settings allow none: --tls-protocols TLSv1.3 without TLS 1.3 suites
# in --tls-cipher-suites): up, and of no use to any client, which is what a test of that wants.
HANDSHAKE_REFUSED = "refuses every TLS handshake"


def refuses_tls_handshakes(port, tls):
    try:
        sock = socket.create_connection(("127.0.0.1", port), timeout=FOUR_LETTER_TIMEOUT_S)
    except OSError:
        return False
    with sock:
        try:
            with tls_probe_context(tls).wrap_socket(sock):
                return False
        except (ssl.SSLEOFError, ssl.SSLZeroReturnError, ConnectionResetError):
            return True
        except ssl.SSLError as e:
            return "ALERT" in (e.reason or "")
        except OSError:
            return False


def server_mode(server):
    tls = server.get("tls")
    mode = mode_of(four_letter(server["client_port"], "srvr",
                               tls_context=tls_probe_context(tls) if tls else None))
    if mode is None and tls and refuses_tls_handshakes(server["client_port"], tls):
        return HANDSHAKE_REFUSED
    return mode


def find_leader(state, mode=server_mode):
    """Index of the leader (or the standalone server), -1 if none answers as one."""
    for server in state["servers"]:
        if server.get("pid") and mode(server) in ("leader", "standalone"):
            return server["index"]
    return -1


def wait_cluster_ready(state, timeout_s, mode=server_mode):
    """Until every server answers srvr and one is leader (or standalone); netlab.py passes its own
    way of asking a server for its mode."""
    def pending():
        silent = [str(s["index"]) for s in state["servers"] if mode(s) is None]
        if silent:
            return "servers " + ", ".join(silent) + " do not answer srvr"
        if all(mode(s) == HANDSHAKE_REFUSED for s in state["servers"]):
            return None
        return None if find_leader(state, mode) >= 0 else "no server reports itself leader"
    lifecycle.wait_ready(state["servers"], pending, timeout_s, server_name)


def start_one_server(state_dir, state, server, launch, mode, timeout_s, no_wait_quorum):
    """start-server: only this server must answer; a lone ensemble member serves only once it has
    a quorum (--no-wait-quorum accepts that it does not yet)."""
    if lifecycle.running(server):
        raise EnvError(f"server {server['index']} is already running (pid {server['pid']})")
    launch(state_dir, state, server)
    lifecycle.save_state(state_dir, state)
    silent = f"server {server['index']} does not answer srvr (no quorum?)"
    try:
        lifecycle.wait_ready([server], lambda: None if mode(server) else silent, timeout_s,
                             server_name)
    except EnvError:
        if not (no_wait_quorum and lifecycle.running(server)):
            raise


def on_server(state_dir, state, args, launch, mode):
    """kill, stop-server, start-server, freeze, thaw of one server: shared with netlab.py."""
    server = server_by_index(state, args.index)
    name = server_name(server)
    if args.command == "kill":
        lifecycle.kill(server, name)
    elif args.command == "stop-server":
        lifecycle.stop([server], server_name, STOP_GRACE_S)
    elif args.command == "start-server":
        start_one_server(state_dir, state, server, launch, mode, args.timeout, args.no_wait_quorum)
    elif args.command == "freeze":
        lifecycle.signal_running(server, signal.SIGSTOP, name)
    elif args.command == "thaw":
        lifecycle.signal_running(server, signal.SIGCONT, name)
    lifecycle.save_state(state_dir, state)


def server_by_index(state, index):
    servers = state["servers"]
    if not 0 <= index < len(servers):
        raise EnvError(f"server index {index} out of range: there are {len(servers)} servers, "
                       f"numbered 0..{len(servers) - 1}")
    return servers[index]


def add_server_commands(sub, timeout_s=READY_TIMEOUT_S):
    """The per-server subcommands, the same in zkenv.py and netlab.py."""
    parsers = []
    for name, text in (("kill", "SIGKILL one server"),
                       ("stop-server", "stop one server (TERM, then KILL)"),
                       ("start-server", "start a stopped server again on its ports"),
                       ("freeze", "SIGSTOP one server"),
                       ("thaw", "SIGCONT one server")):
        p = sub.add_parser(name, help=text)
        p.add_argument("index", type=int, help="server index, from 0")
        p.add_argument("--timeout", type=float, default=timeout_s)
        p.add_argument("--no-wait-quorum", action="store_true",
                       help="start-server: do not fail if the server cannot serve yet")
        parsers.append(p)
    return parsers


def run_command(tool, handler, args):
    """Runs a subcommand; an EnvError becomes one line on stderr and exit status 1."""
    try:
        return handler(args) or 0
    except EnvError as e:
        print(f"{tool}: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{tool}: interrupted", file=sys.stderr)
        return 130


def stop_command(tool, state_dir):
    """The command a watchdog or reaper runs to stop what `tool` started in state_dir."""
    return [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), tool), "stop",
            "--dir", state_dir]


# ---------------------------------------------------------------------------------------------
# Commands


def write_config(state, extra_lines=()):
    """zoo.cfg (and myid) of every server; netlab.py writes its servers' the same way."""
    servers = state["servers"]
    for server in servers:
        os.makedirs(server["data_dir"], exist_ok=True)
        lines = [
            f"tickTime={state['tick_ms']}",
            f"initLimit={state['init_limit']}",
            f"syncLimit={state['sync_limit']}",
            f"dataDir={server['data_dir']}",
            # A --tls server (state["tls"]) takes clients on its secure port only.
            f"{'secureClientPort' if state.get('tls') else 'clientPort'}={server['client_port']}",
            "admin.enableServer=false",
            "4lw.commands.whitelist=*",
            # Unbounded per-host connections: every client of every test comes from one address.
            "maxClientCnxns=0",
        ] + list(extra_lines)
        if len(servers) > 1:
            for peer in servers:
                lines.append(f"server.{peer['index'] + 1}={peer['address']}:{peer['quorum_port']}:"
                             f"{peer['election_port']}")
            with open(os.path.join(server["data_dir"], "myid"), "w") as f:
                f.write(f"{server['index'] + 1}\n")
        with open(server["cfg"], "w") as f:
            f.write("\n".join(lines) + "\n")


def new_state(state_dir, args):
    ports = lifecycle.free_ports(3 * args.servers)
    tls = ({"dir": os.path.join(state_dir, "tls"), "client_auth": args.tls_client_auth,
            "server_cert": args.tls_server_cert, "protocols": split_list(args.tls_protocols),
            "cipher_suites": split_list(args.tls_cipher_suites)} if args.tls else None)
    servers = [server_record(state_dir, index, address="127.0.0.1", client_port=ports[3 * index],
                             quorum_port=ports[3 * index + 1], election_port=ports[3 * index + 2],
                             tls=tls)
               for index in range(args.servers)]
    return {"tick_ms": args.tick_ms, "sync_limit": args.sync_limit, "init_limit": args.init_limit,
            "max_heap_mb": args.max_heap_mb, "servers": servers, "tls": tls}


def command_start(args):
    state_dir = os.path.abspath(args.dir)
    if args.servers < 1:
        raise EnvError(f"--servers must be at least 1, not {args.servers}")
    if args.tick_ms < 1:
        raise EnvError(f"--tick-ms must be positive, not {args.tick_ms}")
    if args.max_heap_mb < 16:
        raise EnvError(f"--max-heap-mb must be at least 16, not {args.max_heap_mb}")
    if args.remove_dir and not args.owner_pid:
        raise EnvError("--remove-dir needs --owner-pid")
    if not args.tls and (args.tls_client_auth != "none" or args.tls_server_cert != "good" or
                         args.tls_protocols or args.tls_cipher_suites):
        raise EnvError("--tls-client-auth, --tls-server-cert, --tls-protocols and --tls-cipher-suites "
                       "need --tls")
    for protocol in split_list(args.tls_protocols):
        if protocol not in TLS_PROTOCOLS:
            raise EnvError(f"--tls-protocols: '{protocol}' is not one of {', '.join(TLS_PROTOCOLS)}")
    check_installation()
    if args.tls:
        check_tls_installation()
    os.makedirs(state_dir, exist_ok=True)
    previous = lifecycle.load_state(state_dir)
    running = [s for s in (previous or {}).get("servers", []) if lifecycle.running(s)]
    if running:
        pids = ", ".join(str(s["pid"]) for s in running)
        raise EnvError(f"{state_dir} already has a running cluster (pids {pids}); "
                       f"run 'zkenv.py stop --dir {state_dir}' first")
    if args.owner_pid:
        lifecycle.own(state_dir, args.owner_pid, stop_command("zkenv.py", state_dir),
                      args.remove_dir)
    write_log4j(state_dir)
    if args.tls:
        tls_dir = os.path.join(state_dir, "tls")
        shutil.rmtree(tls_dir, ignore_errors=True)
        make_certificates(tls_dir)
        write_server_keystore(tls_dir, TLS_FILES["expired_server_cert" if args.tls_server_cert == "expired"
                                                 else "server_cert"])

    def attempt():
        # A fresh start: the data of an earlier run in this directory is ours to drop.
        for entry in os.listdir(state_dir):
            if entry.startswith("server-") or entry == "connect_string":
                shutil.rmtree(os.path.join(state_dir, entry), ignore_errors=True)
        attempt.state = new_state(state_dir, args)
        tls = attempt.state["tls"]
        write_config(attempt.state, ["minSessionTimeout=400", "maxSessionTimeout=60000"] +
                     (tls_config_lines(tls) if tls else ["clientPortAddress=127.0.0.1"]))
        for server in attempt.state["servers"]:
            launch_server(state_dir, attempt.state, server)
        lifecycle.save_state(state_dir, attempt.state)
        wait_cluster_ready(attempt.state, args.timeout)
        return attempt.state

    def clean_up():
        state = getattr(attempt, "state", None)
        if state is not None:
            lifecycle.stop(state["servers"], server_name, grace_s=0)
            lifecycle.save_state(state_dir, state)

    state = lifecycle.start_with_retries(state_dir, attempt, clean_up, START_ATTEMPTS)
    with open(os.path.join(state_dir, "connect_string"), "w") as f:
        f.write(connect_string(state) + "\n")
    print(connect_string(state), flush=True)


def command_stop(args):
    state_dir = os.path.abspath(args.dir)
    state = lifecycle.load_state(state_dir)
    if state is None:
        print(f"zkenv: nothing to stop in {state_dir} (no state.json)", file=sys.stderr)
        return
    try:
        # Signalled all at once, so that an ensemble goes down together.
        lifecycle.stop(state["servers"], server_name, STOP_GRACE_S)
    finally:
        lifecycle.save_state(state_dir, state)


def status_line(server, mode, label, where=""):
    """One server's line of `status` (netlab.py adds where it runs)."""
    alive = lifecycle.running(server)
    served = mode(server) if alive else None
    return (f"{label} pid={server['pid'] if alive else '-'} {where}"
            f"address={server['address']}:{server['client_port']} "
            f"state={'running' if alive else 'stopped'} mode={served or '-'}")


def command_status(args):
    state = lifecycle.require_state(os.path.abspath(args.dir), "cluster")
    for server in state["servers"]:
        print(status_line(server, server_mode, server["index"]))


def command_leader(args):
    print(find_leader(lifecycle.require_state(os.path.abspath(args.dir), "cluster")))


def command_on_server(args):
    state_dir = os.path.abspath(args.dir)
    on_server(state_dir, lifecycle.require_state(state_dir, "cluster"), args, launch_server,
              server_mode)


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
    start.add_argument("--remove-dir", action="store_true",
                       help="with --owner-pid: then remove the state directory too")
    start.add_argument("--tls", action="store_true",
                       help="clients on a TLS port only (secureClientPort, Netty); certificates "
                            "are made in DIR/tls")
    start.add_argument("--tls-client-auth", choices=TLS_CLIENT_AUTH, default="none",
                       help="the server's ssl.clientAuth")
    start.add_argument("--tls-server-cert", choices=TLS_SERVER_CERTS, default="good",
                       help="the certificate the server presents: good, or expired")
    start.add_argument("--tls-protocols", default="",
                       help="the server's ssl.enabledProtocols, e.g. TLSv1.3 (ssl.protocol: the "
                            "last one); default: ZooKeeper's")
    start.add_argument("--tls-cipher-suites", default="",
                       help="the server's ssl.ciphersuites (Java names, comma-separated); "
                            "default: ZooKeeper's")
    start.set_defaults(handler=command_start)

    for name, handler, text in (("stop", command_stop, "stop every recorded server"),
                                ("status", command_status, "one line per server"),
                                ("leader", command_leader, "index of the leader, -1 if none")):
        p = sub.add_parser(name, help=text)
        p.set_defaults(handler=handler)
    for p in add_server_commands(sub):
        p.set_defaults(handler=command_on_server)

    for p in list(sub.choices.values()):
        p.add_argument("--dir", required=True, help="state directory")

    args = parser.parse_args(argv)
    return run_command("zkenv", args.handler, args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
