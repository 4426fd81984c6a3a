#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""A ZooKeeper lab of network namespaces, for tests that cut real network links.

Every host of a lab, servers s0..sN-1 and clients c0..cM-1, is a network namespace of its own with
lo up and one interface, eth0, a veth whose other end sits on a bridge (br0) inside a hub
namespace. Hosts get addresses 10.213.R.10+I (servers) and 10.213.R.100+J (clients) in a /24 chosen
at random per lab. Faults are nft rules inside the receiving host's namespace (table inet zkrlab,
chain input), so a dropped packet simply vanishes, as on a cut cable: the sender sees no error.

Nothing is created in, or sent from, the root namespace: interfaces are made inside the hub
namespace (the peer end directly in the host's namespace), and every probe opens its socket inside
a lab namespace. All names carry the lab's name, "zkr" and four hex digits: zkrNNNN-hub,
zkrNNNN-s0, zkrNNNN-c1. /run/zkr-netlab/LAB.json records each lab's owner and state directory
before anything is created and is removed last, so `gc` can remove the labs of dead owners.

Servers run `java ... QuorumPeerMain CFG` (ZooKeeperServerMain for a single server) under
`ip netns exec`, which execs in place: the recorded pid is the JVM's. Every server listens on port
2181 (clients), 2888 and 3888 (quorum) of its own address; each namespace has its own ports.

  netlab.py start --dir DIR [--servers 3] [--clients 2] [--tick-ms 200] [--sync-limit 2]
                  [--init-limit 10] [--owner-pid PID [--remove-dir]]   prints the lab, one fact a line
  netlab.py stop --dir DIR
  netlab.py drop FROM TO | cut A B | undrop FROM TO | uncut A B | isolate-from-servers I |
            isolate HOST | heal  --dir DIR
  netlab.py kill|stop-server|start-server|freeze|thaw I --dir DIR
  netlab.py status|leader --dir DIR;  netlab.py four-letter I CMD --dir DIR
  netlab.py gc      remove the labs whose owner process is gone
"""

import argparse
import ctypes
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lifecycle  # noqa: E402  (same directory: the one lifecycle of every managed process)
import zkenv  # noqa: E402  (the servers' configuration, commands and readiness)

from lifecycle import EnvError  # noqa: E402

IP = "/usr/sbin/ip"
NFT = "/usr/sbin/nft"
REGISTRY = "/run/zkr-netlab"
NETNS_DIR = "/run/netns"
SUBNET_PREFIX = "10.213"
CLIENT_PORT, QUORUM_PORT, ELECTION_PORT = 2181, 2888, 3888
LAB_NAME = re.compile(r"^zkr[0-9a-f]{4}$")
CLONE_NEWNET = 0x40000000
NFT_TABLE = "zkrlab"

_libc = ctypes.CDLL(None, use_errno=True)


# ---------------------------------------------------------------------------------------------
# Commands run as root


def run(argv, stdin_text=None, check=True):
    try:
        result = subprocess.run(argv, input=stdin_text, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise EnvError(f"{' '.join(argv)}: {e}")
    if check and result.returncode != 0:
        raise EnvError(f"{' '.join(argv)} failed ({result.returncode}): "
                       f"{(result.stderr or result.stdout).strip()}")
    return result


def in_ns(ns, argv, stdin_text=None, check=True):
    return run([IP, "netns", "exec", ns] + argv, stdin_text, check)


def unavailable_reason():
    """'' if this process can build labs, else why not."""
    if os.geteuid() != 0:
        return "network namespaces and nft need root (running as uid %d)" % os.geteuid()
    for tool in (IP, NFT):
        if not os.access(tool, os.X_OK):
            return f"{tool} is missing: install the Debian packages iproute2 and nftables"
    probe = f"zkr{random.getrandbits(16):04x}-probe"
    try:
        run([IP, "netns", "add", probe])
    except EnvError as e:
        return f"cannot create a network namespace: {e}"
    try:
        in_ns(probe, [NFT, "-f", "-"], NFT_BASE)
        run([IP, "-n", probe, "link", "add", "br0", "type", "bridge"])
        run([IP, "-n", probe, "link", "add", "v0", "type", "veth", "peer", "name", "v1"])
    except EnvError as e:
        return f"network namespaces lack what a lab needs (nft, bridge or veth): {e}"
    finally:
        run([IP, "netns", "del", probe], check=False)
    return ""


# ---------------------------------------------------------------------------------------------
# Sockets inside a namespace


def socket_in(ns):
    """A TCP socket created inside namespace ns. A socket keeps the namespace it was made in, so
    this process switches there only for the socket() call and straight back."""
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        target = os.open(os.path.join(NETNS_DIR, ns), os.O_RDONLY)
    except OSError as e:
        os.close(own)
        raise EnvError(f"no network namespace {ns}: {e}")
    try:
        if _libc.setns(target, CLONE_NEWNET) != 0:
            raise EnvError(f"setns({ns}): {os.strerror(ctypes.get_errno())}")
        try:
            return socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        finally:
            if _libc.setns(own, CLONE_NEWNET) != 0:
                # Staying in the lab's namespace would send later commands there: stop at once.
                os.write(2, b"netlab: cannot return to the original network namespace\n")
                os._exit(70)
    finally:
        os.close(target)
        os.close(own)


def four_letter(server, command, timeout_s=zkenv.FOUR_LETTER_TIMEOUT_S):
    """Four-letter command from inside the server's own namespace, so that partitions never hide
    the answer; the reply, or None without an answer."""
    return zkenv.four_letter(CLIENT_PORT, command, timeout_s, server["address"],
                             make_socket=lambda: socket_in(server["ns"]))


def server_mode(server):
    return zkenv.mode_of(four_letter(server, "srvr"))


# ---------------------------------------------------------------------------------------------
# State


def registry_path(lab):
    return os.path.join(REGISTRY, lab + ".json")


def lab_namespaces(state):
    return [state["hub"]] + [h["ns"] for h in state["servers"] + state["clients"]]


def existing_namespaces():
    try:
        return set(os.listdir(NETNS_DIR))
    except FileNotFoundError:
        return set()


def claim_lab(state_dir, owner_pid, owner_start):
    """Picks a free lab name and /24 and writes the registry entry (O_EXCL) before anything else."""
    os.makedirs(REGISTRY, exist_ok=True)
    for _ in range(100):
        lab = f"zkr{random.getrandbits(16):04x}"
        if any(ns.startswith(lab + "-") for ns in existing_namespaces()):
            continue
        used = set()
        for entry in os.listdir(REGISTRY):
            try:
                with open(os.path.join(REGISTRY, entry)) as f:
                    used.add(json.load(f).get("subnet"))
            except (OSError, ValueError):
                pass
        free = [n for n in range(256) if f"{SUBNET_PREFIX}.{n}" not in used]
        if not free:
            raise EnvError(f"every 10.213.X.0/24 is taken by a lab in {REGISTRY}")
        subnet = f"{SUBNET_PREFIX}.{random.choice(free)}"
        record = {"lab": lab, "subnet": subnet, "state_dir": state_dir, "owner_pid": owner_pid,
                  "owner_start": owner_start, "creator_pid": os.getpid(),
                  "creator_start": lifecycle.start_time(os.getpid())}
        try:
            fd = os.open(registry_path(lab), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            continue
        with os.fdopen(fd, "w") as f:
            json.dump(record, f)
        return lab, subnet
    raise EnvError("cannot find a free lab name")


def host(state, name):
    """The host record for "sI" or "cJ"."""
    for record in state["servers"] + state["clients"]:
        if record["name"] == name:
            return record
    names = ", ".join(h["name"] for h in state["servers"] + state["clients"])
    raise EnvError(f"no host '{name}' in this lab (hosts: {names})")


def new_state(state_dir, lab, subnet, args):
    def record(name, address):
        return {"name": name, "ns": f"{lab}-{name}", "address": address}

    servers = [zkenv.server_record(state_dir, index, client_port=CLIENT_PORT, quorum_port=QUORUM_PORT,
                                   election_port=ELECTION_PORT,
                                   **record(f"s{index}", f"{subnet}.{10 + index}"))
               for index in range(args.servers)]
    clients = [record(f"c{index}", f"{subnet}.{100 + index}") for index in range(args.clients)]
    return {"lab": lab, "subnet": subnet + ".0/24", "hub": f"{lab}-hub",
            "tick_ms": args.tick_ms, "sync_limit": args.sync_limit, "init_limit": args.init_limit,
            "servers": servers, "clients": clients, "drops": []}


def connect_string(state):
    return ",".join(f"{s['address']}:{CLIENT_PORT}" for s in state["servers"])


# ---------------------------------------------------------------------------------------------
# Building and removing the network


NFT_BASE = (f"table inet {NFT_TABLE} {{\n"
            f"  chain input {{ type filter hook input priority 0; policy accept; }}\n"
            f"}}\n")


def build_network(state):
    hub = state["hub"]
    run([IP, "netns", "add", hub])
    run([IP, "-n", hub, "link", "add", "br0", "type", "bridge"])
    run([IP, "-n", hub, "link", "set", "br0", "up"])
    run([IP, "-n", hub, "link", "set", "lo", "up"])
    for record in state["servers"] + state["clients"]:
        ns = record["ns"]
        run([IP, "netns", "add", ns])
        # Both ends are born inside lab namespaces: the root namespace never holds them.
        run([IP, "-n", hub, "link", "add", record["name"], "type", "veth",
             "peer", "name", "eth0", "netns", ns])
        run([IP, "-n", hub, "link", "set", record["name"], "master", "br0", "up"])
        run([IP, "-n", ns, "link", "set", "lo", "up"])
        run([IP, "-n", ns, "addr", "add", f"{record['address']}/24", "dev", "eth0"])
        run([IP, "-n", ns, "link", "set", "eth0", "up"])
        in_ns(ns, [NFT, "-f", "-"], NFT_BASE)


def kill_namespace_processes(ns):
    """Every process still inside one of our namespaces is ours (a server or a client the test
    left): KILL it, so that deleting the namespace really frees it."""
    result = run([IP, "netns", "pids", ns], check=False)
    for word in result.stdout.split():
        try:
            os.kill(int(word), signal.SIGKILL)
            os.kill(int(word), signal.SIGCONT)
        except (ValueError, ProcessLookupError):
            pass


def remove_namespaces(names):
    present = existing_namespaces()
    failures = []
    for ns in names:
        if ns in present:
            kill_namespace_processes(ns)
    for ns in names:
        if ns in present:
            result = run([IP, "netns", "del", ns], check=False)
            if result.returncode != 0:
                failures.append(f"{ns}: {result.stderr.strip()}")
    return failures


# ---------------------------------------------------------------------------------------------
# Servers


def launch_server(state_dir, state, server):
    # ip netns exec execs java in place: the recorded pid is the JVM's.
    argv = [IP, "netns", "exec", server["ns"]] + zkenv.server_argv(state_dir, state, server)
    lifecycle.launch(server, argv, server["console"], zkenv.server_name(server))


def stop_servers(state):
    try:
        lifecycle.stop(state["servers"], zkenv.server_name, zkenv.STOP_GRACE_S)
        return []
    except EnvError as e:
        return [str(e)]


# ---------------------------------------------------------------------------------------------
# Lab life cycle


def teardown(state_dir, state, lab):
    """Stops the servers, kills what is left in the namespaces, deletes them, then the registry
    entry. Works from the registry alone when the state directory is gone."""
    failures = []
    if state is not None:
        failures += stop_servers(state)
        namespaces = lab_namespaces(state)
    else:
        namespaces = []
    # Whatever the state says, every namespace with the lab's prefix goes.
    namespaces += sorted(ns for ns in existing_namespaces()
                         if ns.startswith(lab + "-") and ns not in namespaces)
    failures += remove_namespaces(namespaces)
    if state is not None:
        state["torn_down"] = True
        try:
            lifecycle.save_state(state_dir, state)
        except OSError:
            pass
    if not failures:
        try:
            os.remove(registry_path(lab))
        except FileNotFoundError:
            pass
    if failures:
        raise EnvError("; ".join(failures))


def command_start(args):
    state_dir = os.path.abspath(args.dir)
    if args.servers < 1:
        raise EnvError(f"--servers must be at least 1, not {args.servers}")
    if not 0 <= args.clients <= 100:
        raise EnvError(f"--clients must be 0..100, not {args.clients}")
    if args.servers > 80:
        raise EnvError(f"--servers must be at most 80, not {args.servers}")
    for name in ("tick_ms", "sync_limit", "init_limit"):
        if getattr(args, name) < 1:
            raise EnvError(f"--{name.replace('_', '-')} must be positive, not {getattr(args, name)}")
    if args.remove_dir and not args.owner_pid:
        raise EnvError("--remove-dir needs --owner-pid")
    reason = unavailable_reason()
    if reason:
        raise EnvError(reason)
    zkenv.check_installation()
    os.makedirs(state_dir, exist_ok=True)
    previous = lifecycle.load_state(state_dir)
    if previous is not None and not previous.get("torn_down"):
        raise EnvError(f"{state_dir} already holds lab {previous['lab']}; "
                       f"run 'netlab.py stop --dir {state_dir}' first")
    owner_start = None
    if args.owner_pid:
        lifecycle.own(state_dir, args.owner_pid, zkenv.stop_command("netlab.py", state_dir),
                      args.remove_dir)
        owner_start = lifecycle.read_owner(state_dir)["owner_start"]
    collect_garbage(quiet=True)

    zkenv.write_log4j(state_dir)
    for entry in os.listdir(state_dir):
        if entry.startswith("server-"):
            shutil.rmtree(os.path.join(state_dir, entry), ignore_errors=True)

    lab, subnet = claim_lab(state_dir, args.owner_pid, owner_start)
    state = new_state(state_dir, lab, subnet, args)
    started = time.monotonic()
    try:
        lifecycle.save_state(state_dir, state)
        build_network(state)
        zkenv.write_config(state)
        for server in state["servers"]:
            launch_server(state_dir, state, server)
        lifecycle.save_state(state_dir, state)
        zkenv.wait_cluster_ready(state, args.timeout, server_mode)
        lifecycle.require_owner(state_dir)
        state["start_seconds"] = round(time.monotonic() - started, 2)
        lifecycle.save_state(state_dir, state)
        mark_ready(lab)
    except BaseException:
        try:
            teardown(state_dir, state, lab)
        except EnvError as e:
            print(f"netlab: cleanup after a failed start: {e}", file=sys.stderr)
        raise
    print_summary(state)


def print_summary(state):
    """One fact per line, easy to read from C++: the full record is STATEDIR/state.json."""
    lines = [f"lab {state['lab']}", f"subnet {state['subnet']}",
             f"start_seconds {state.get('start_seconds', 0)}"]
    lines += [f"server {s['index']} {s['address']}:{CLIENT_PORT} {s['ns']}" for s in state["servers"]]
    lines += [f"client {c['name'][1:]} {c['address']} {c['ns']}" for c in state["clients"]]
    print("\n".join(lines), flush=True)


def command_stop(args):
    state_dir = os.path.abspath(args.dir)
    state = lifecycle.load_state(state_dir)
    if state is None or state.get("torn_down"):
        return
    teardown(state_dir, state, state["lab"])


def alive(record, key):
    pid = record.get(f"{key}_pid")
    return lifecycle.running({"pid": pid, "start": record.get(f"{key}_start")})


def owner_alive(record):
    """A lab lives while the netlab.py building it runs, then while its owner does. A lab started
    without an owner lives until `stop`, unless its start never finished."""
    if alive(record, "creator"):
        return True
    if record.get("owner_pid"):
        return alive(record, "owner")
    return bool(record.get("ready"))


def mark_ready(lab):
    path = registry_path(lab)
    with open(path) as f:
        record = json.load(f)
    record["ready"] = True
    with open(path + ".tmp", "w") as f:
        json.dump(record, f)
    os.replace(path + ".tmp", path)


def collect_garbage(quiet=False):
    """Removes every registered lab whose owner and creator are both gone."""
    removed = []
    try:
        entries = sorted(os.listdir(REGISTRY))
    except FileNotFoundError:
        entries = []
    for entry in entries:
        lab = entry[:-len(".json")] if entry.endswith(".json") else ""  # not *.tmp
        if not LAB_NAME.match(lab):
            continue
        try:
            with open(os.path.join(REGISTRY, entry)) as f:
                record = json.load(f)
        except (OSError, ValueError):
            continue
        if owner_alive(record):
            continue
        state_dir = record.get("state_dir") or ""
        try:
            state = lifecycle.load_state(state_dir) if state_dir else None
        except EnvError:
            state = None
        if state is not None and state.get("lab") != lab:
            state = None
        try:
            teardown(state_dir, state, lab)
            removed.append(lab)
        except EnvError as e:
            print(f"netlab gc: {lab}: {e}", file=sys.stderr)
    if removed and not quiet:
        print("removed " + " ".join(removed))
    return removed


def command_gc(args):
    collect_garbage()


# ---------------------------------------------------------------------------------------------
# Faults


def apply_rules(state):
    """Rewrites every host's input chain from state['drops'] in one nft transaction each."""
    for record in state["servers"] + state["clients"]:
        sources = [host(state, source)["address"] for source, target in state["drops"]
                   if target == record["name"]]
        script = f"flush chain inet {NFT_TABLE} input\n"
        if sources:
            script += (f"add rule inet {NFT_TABLE} input ip saddr {{ {', '.join(sources)} }} "
                       f"counter drop\n")
        in_ns(record["ns"], [NFT, "-f", "-"], script)


def add_drops(state_dir, state, pairs):
    for source, target in pairs:
        if source == target:
            raise EnvError(f"cannot drop packets from {source} to itself")
        host(state, source)
        host(state, target)
        if [source, target] not in state["drops"]:
            state["drops"].append([source, target])
    apply_rules(state)
    lifecycle.save_state(state_dir, state)


def command_fault(args):
    state_dir = os.path.abspath(args.dir)
    state = lifecycle.require_state(state_dir, "lab")
    others = [h["name"] for h in state["servers"] + state["clients"]]
    if args.command == "drop":
        pairs = [(args.a, args.b)]
    elif args.command == "cut":
        pairs = [(args.a, args.b), (args.b, args.a)]
    elif args.command == "isolate-from-servers":
        name = zkenv.server_by_index(state, args.index)["name"]
        pairs = [(name, s["name"]) for s in state["servers"] if s["name"] != name]
        pairs += [(b, a) for a, b in pairs]
    elif args.command == "isolate":
        host(state, args.a)
        pairs = [(args.a, other) for other in others if other != args.a]
        pairs += [(b, a) for a, b in pairs]
    elif args.command in ("undrop", "uncut"):
        host(state, args.a)
        host(state, args.b)
        removed = [[args.a, args.b]] + ([[args.b, args.a]] if args.command == "uncut" else [])
        state["drops"] = [pair for pair in state["drops"] if pair not in removed]
        apply_rules(state)
        lifecycle.save_state(state_dir, state)
        return
    elif args.command == "heal":
        state["drops"] = []
        apply_rules(state)
        lifecycle.save_state(state_dir, state)
        return
    add_drops(state_dir, state, pairs)


# ---------------------------------------------------------------------------------------------
# Queries and single servers


def command_status(args):
    state = lifecycle.require_state(os.path.abspath(args.dir), "lab")
    for server in state["servers"]:
        print(zkenv.status_line(server, server_mode, server["name"], f"ns={server['ns']} "))
    for client in state["clients"]:
        print(f"{client['name']} ns={client['ns']} address={client['address']}")
    for source, target in state["drops"]:
        print(f"drop {source} -> {target}")


def command_leader(args):
    print(zkenv.find_leader(lifecycle.require_state(os.path.abspath(args.dir), "lab"), server_mode))


def command_four_letter(args):
    state = lifecycle.require_state(os.path.abspath(args.dir), "lab")
    server = zkenv.server_by_index(state, args.index)
    reply = four_letter(server, args.word)
    sys.stdout.write(reply or "")


def command_on_server(args):
    state_dir = os.path.abspath(args.dir)
    zkenv.on_server(state_dir, lifecycle.require_state(state_dir, "lab"), args, launch_server,
                    server_mode)


def command_check(args):
    reason = unavailable_reason()
    print(reason)
    return 0 if not reason else 2


def main(argv):
    parser = argparse.ArgumentParser(description="ZooKeeper labs in network namespaces.")
    sub = parser.add_subparsers(dest="command", required=True)
    with_dir = []

    start = sub.add_parser("start", help="build the lab, start the servers, print the state")
    start.add_argument("--servers", type=int, default=3)
    start.add_argument("--clients", type=int, default=2)
    start.add_argument("--tick-ms", type=int, default=200)
    start.add_argument("--sync-limit", type=int, default=2)
    start.add_argument("--init-limit", type=int, default=10)
    start.add_argument("--timeout", type=float, default=zkenv.READY_TIMEOUT_S)
    start.add_argument("--owner-pid", type=int, default=0,
                       help="tear the lab down when this process ends")
    start.add_argument("--remove-dir", action="store_true",
                       help="with --owner-pid: then remove the state directory too")
    start.set_defaults(handler=command_start)
    with_dir.append(start)

    for name, handler, text in (("stop", command_stop, "stop the servers, delete the namespaces"),
                                ("status", command_status, "servers, clients and drops"),
                                ("leader", command_leader, "index of the leader, -1 if none")):
        p = sub.add_parser(name, help=text)
        p.set_defaults(handler=handler)
        with_dir.append(p)

    for name, text in (("drop", "drop packets from A to B"), ("cut", "drop both ways"),
                       ("undrop", "let packets from A to B pass again"),
                       ("uncut", "let packets between A and B pass again, both ways")):
        p = sub.add_parser(name, help=text)
        p.add_argument("a")
        p.add_argument("b")
        p.set_defaults(handler=command_fault)
        with_dir.append(p)
    p = sub.add_parser("isolate", help="cut one host from every other host")
    p.add_argument("a")
    p.set_defaults(handler=command_fault)
    with_dir.append(p)
    p = sub.add_parser("isolate-from-servers", help="cut server I from the other servers")
    p.add_argument("index", type=int)
    p.set_defaults(handler=command_fault)
    with_dir.append(p)
    p = sub.add_parser("heal", help="remove every drop")
    p.set_defaults(handler=command_fault)
    with_dir.append(p)

    p = sub.add_parser("four-letter", help="send a four-letter word to server I")
    p.add_argument("index", type=int)
    p.add_argument("word")
    p.set_defaults(handler=command_four_letter)
    with_dir.append(p)

    for p in zkenv.add_server_commands(sub):
        p.set_defaults(handler=command_on_server)
        with_dir.append(p)

    sub.add_parser("gc", help="remove the labs whose owner is gone").set_defaults(
        handler=command_gc)
    sub.add_parser("check", help="print why labs cannot be built here ('' if they can)"
                   ).set_defaults(handler=command_check)

    for p in with_dir:
        p.add_argument("--dir", required=True, help="state directory")

    args = parser.parse_args(argv)
    return zkenv.run_command("netlab", args.handler, args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
