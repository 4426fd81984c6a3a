#!/usr/bin/python3
"""A kazoo (Debian's python3-kazoo) participant for the interoperability tests.

    /usr/bin/python3 kazoo_peer.py CONNECT PATH WHO LOG ITERATIONS HOLD_MS CLIENTS

Starts CLIENTS clients (one session each, named WHO-0, WHO-1, ...), each with a kazoo Lock that
also counts "-lock-" nodes (ours and Curator's) as contenders; prints "READY" once all are
connected, waits for a line on stdin, then each client takes the lock ITERATIONS times. Around
each critical section it appends "ENTER <name> <ns>" and "EXIT <name> <ns>" to LOG
(time.monotonic_ns, CLOCK_MONOTONIC), each line with one O_APPEND write. Prints "DONE" at the end.
"""
import os
import sys
import threading
import time

from kazoo.client import KazooClient


def main(argv):
    if len(argv) != 8:
        print("usage: kazoo_peer.py CONNECT PATH WHO LOG ITERATIONS HOLD_MS CLIENTS", file=sys.stderr)
        return 64
    connect, path, who, log_path = argv[1], argv[2], argv[3], argv[4]
    iterations, hold, count = int(argv[5]), int(argv[6]) / 1000.0, int(argv[7])
    log = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def record(event, name):
        os.write(log, f"{event} {name} {time.monotonic_ns()}\n".encode("ascii"))

    clients = []
    for _ in range(count):
        client = KazooClient(hosts=connect, timeout=10.0)
        client.start(timeout=30)
        clients.append(client)
    print("READY", flush=True)
    sys.stdin.readline()

    failures = []

    def run(index):
        name = f"{who}-{index}"
        try:
            lock = clients[index].Lock(path, name, extra_lock_patterns=["-lock-"])
            for _ in range(iterations):
                with lock:
                    record("ENTER", name)
                    time.sleep(hold)
                    record("EXIT", name)
        except Exception as error:  # reported to the test, which fails on it
            failures.append(f"{name}: {error!r}")

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    for client in clients:
        client.stop()
        client.close()
    if failures or any(thread.is_alive() for thread in threads):
        print("ERROR " + "; ".join(failures or ["timed out"]), flush=True)
        return 1
    print("DONE", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
