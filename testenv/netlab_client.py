#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""A scriptable kazoo client for lab tests: one request per stdin line, one reply line on stdout.

  netlab_client.py HOSTS [--session-timeout S] [--op-timeout S]

Prints "connected" once its session is up, or "error start timeout" and exits after
--connect-timeout seconds. Then, per line:

  exists PATH | get PATH | create PATH [DATA] | set PATH [DATA] | delete PATH | children PATH |
  sync PATH | session | state | quit

and answers "ok <result>" ("ok yes|no" for exists, the data for get, the path for create, the
sorted children joined by commas, the session id in hex, kazoo's state) or
"error <exception name>" (NoNodeError, NodeExistsError, ConnectionLoss, ...). A request that gets no answer within
--op-timeout seconds answers "error timeout"; its reply, should it come later, is ignored.
Between requests kazoo keeps reconnecting by itself, as an application's client would.
"""

import argparse
import logging
import os
import sys

from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError


def reply(text):
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("hosts")
    parser.add_argument("--session-timeout", type=float, default=10.0)
    parser.add_argument("--op-timeout", type=float, default=2.0)
    parser.add_argument("--connect-timeout", type=float, default=15.0)
    args = parser.parse_args()
    logging.basicConfig(level=logging.CRITICAL)

    client = KazooClient(hosts=args.hosts, timeout=args.session_timeout,
                         connection_retry={"max_tries": -1, "delay": 0.1, "max_delay": 0.5},
                         randomize_hosts=False)
    # start() would stop the client on a timeout, waiting out a connect stuck on a dropped SYN.
    connected = client.start_async()
    connected.wait(timeout=args.connect_timeout)
    if not client.connected:
        reply("error start timeout")
        os._exit(1)  # kazoo's connection thread would keep the process alive, retrying
    reply("connected")

    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        command, rest = words[0], words[1:]
        if command == "quit":
            break
        try:
            if command == "state":
                reply(f"ok {client.state}")
                continue
            if command == "exists":
                result = client.exists_async(rest[0]).get(timeout=args.op_timeout)
                reply(f"ok {'yes' if result else 'no'}")
            elif command == "get":
                data, _ = client.get_async(rest[0]).get(timeout=args.op_timeout)
                reply(f"ok {data.decode(errors='replace')}")
            elif command == "create":
                data = (rest[1] if len(rest) > 1 else "").encode()
                path = client.create_async(rest[0], data).get(timeout=args.op_timeout)
                reply(f"ok {path}")
            elif command == "set":
                data = (rest[1] if len(rest) > 1 else "").encode()
                client.set_async(rest[0], data).get(timeout=args.op_timeout)
                reply("ok")
            elif command == "delete":
                client.delete_async(rest[0]).get(timeout=args.op_timeout)
                reply("ok")
            elif command == "children":
                children = client.get_children_async(rest[0]).get(timeout=args.op_timeout)
                reply("ok " + ",".join(sorted(children)))
            elif command == "session":
                session_id, _ = client.client_id
                reply(f"ok {session_id:#x}")
            elif command == "sync":
                client.sync_async(rest[0]).get(timeout=args.op_timeout)
                reply("ok")
            else:
                reply(f"error unknown-command {command}")
        except KazooTimeoutError:
            reply("error timeout")
        except IndexError:
            reply(f"error missing-argument {command}")
        except Exception as e:  # noqa: BLE001
            reply(f"error {type(e).__name__}")
    try:
        client.stop()
        client.close()
    except Exception:  # noqa: BLE001
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
