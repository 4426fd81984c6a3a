#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""bench/cache_compare's driver for kazoo's TreeCache (Debian's python3-kazoo):

    /usr/bin/python3 kazoo_cache_driver.py CONNECT ROOT NODES

Prints "LOADED <ms> <rss bytes added> <nodes cached>" once the initial load is complete, waits for a
line on stdin, then "EVENTS <updates seen> <seconds from first to last>" once it has seen NODES
updates (or 60 s passed).
"""
import os
import sys
import threading
import time

from kazoo.client import KazooClient
from kazoo.recipe.cache import TreeCache, TreeEvent


def rss_bytes():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def main(argv):
    connect, root, nodes = argv[1], argv[2], int(argv[3])
    client = KazooClient(hosts=connect, timeout=10.0)
    client.start(timeout=30)
    loaded = threading.Event()
    seen = {"updates": 0, "first": 0.0, "last": 0.0}

    def listener(event):
        if event.event_type == TreeEvent.INITIALIZED:
            loaded.set()
        elif event.event_type == TreeEvent.NODE_UPDATED:
            now = time.monotonic()
            if seen["updates"] == 0:
                seen["first"] = now
            seen["updates"] += 1
            seen["last"] = now

    rss_before = rss_bytes()
    start = time.monotonic()
    cache = TreeCache(client, root)
    cache.listen(listener)
    cache.start()
    loaded.wait(300)
    load_ms = (time.monotonic() - start) * 1000
    cached = 0
    todo = [root]
    while todo:  # count what the cache holds, through its own accessors
        path = todo.pop()
        cached += 1
        todo.extend(path + "/" + name for name in (cache.get_children(path) or ()))
    print(f"LOADED {load_ms:.1f} {rss_bytes() - rss_before} {cached}", flush=True)
    sys.stdin.readline()
    deadline = time.monotonic() + 60
    while seen["updates"] < nodes and time.monotonic() < deadline:
        time.sleep(0.005)
    print(f"EVENTS {seen['updates']} {seen['last'] - seen['first']:.3f}", flush=True)
    cache.close()
    client.stop()
    client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
