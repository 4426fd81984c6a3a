#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""A kazoo client on a zklock path, for the interop test.

  kazoo_lock.py SERVERS PATH hold   take the lock, print "held", keep it until stdin closes,
                                    release, print "released"
  kazoo_lock.py SERVERS PATH try    try once without waiting, print "acquired" or "busy"
  kazoo_lock.py SERVERS NODE delete delete NODE (an operator removing a lock node), print "deleted"

extra_lock_patterns=["-lock-"] makes kazoo count zkrecipes/Curator nodes as contenders.
"""
import sys

from kazoo.client import KazooClient


def main():
    servers, path, mode = sys.argv[1:4]
    client = KazooClient(hosts=servers, timeout=10)
    client.start(timeout=15)
    try:
        if mode == "delete":
            client.delete(path)
            print("deleted", flush=True)
            return 0
        lock = client.Lock(path, identifier="kazoo-interop", extra_lock_patterns=["-lock-"])
        if mode == "hold":
            if not lock.acquire(timeout=60):
                print("timeout", flush=True)
                return 1
            print("held", flush=True)
            sys.stdin.read()
            lock.release()
            print("released", flush=True)
        elif mode == "try":
            acquired = lock.acquire(blocking=False)
            print("acquired" if acquired else "busy", flush=True)
            if acquired:
                lock.release()
        else:
            print(f"unknown mode {mode}", file=sys.stderr)
            return 2
    finally:
        client.stop()
        client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
