#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""A kazoo (Debian's python3-kazoo) participant for the interoperability tests.

    /usr/bin/python3 kazoo_peer.py CONNECT PATH WHO LOG ITERATIONS HOLD_MS CLIENTS [MODE]

Starts CLIENTS clients (one session each, named WHO-0, WHO-1, ...); prints "READY" once all are
connected, waits for a line on stdin, then each client enters its critical section ITERATIONS
times. Around each critical section it appends "ENTER <name> <ns> [<token>]" and "EXIT <name> <ns>"
to LOG (time.monotonic_ns, CLOCK_MONOTONIC), each line with one O_APPEND write. Prints "DONE" at
the end. ITERATIONS 0 is the churn mode: every client enters again and
again, idle up to HOLD_MS between sections, until a second line (or the end) of stdin; an error it
meets (a server restarted under it) is printed as "RETRY <name> <error>" and it goes on (lock,
election and semaphore:N). MODE:
  lock (the default)  a kazoo Lock that also counts "-lock-" nodes (ours and Curator's) as contenders;
  election            a plain kazoo Election, each run one term, whose ENTER line carries the term's
                      fencing token (the czxid of the client's lock node);
  semaphore:N         a lease of a kazoo Semaphore with N leases, whose ENTER lines carry the lease's
                      token (the czxid of its lease node). HOLD_MS -1 holds the first lease until
                      the process is killed (it prints "HOLDING <name>").
  party, shallow-party  each client joins a kazoo Party (ShallowParty) with its name as identifier;
                      once the first client counts ITERATIONS members it prints "MEMBERS <id>,..."
                      (sorted), and the clients leave at the next line on stdin.
  double-barrier:N    each client enters a kazoo DoubleBarrier of N participants, logs ENTER, waits
                      HOLD_MS, leaves and logs EXIT (one round).
  tree                each client writes ITERATIONS nodes PATH/<name>-<k> one change at a time,
                      HOLD_MS apart: creates it with "c", sets "s", and deletes it when k is odd
                      (for the cache tests: nothing is logged).
  counter             kazoo's Counter (an int, default 0): each client adds 1 ITERATIONS times and
                      appends "ADD <name> <ns> <value written>" to LOG; HOLD_MS is ignored;
  counter:curator     the same with Counter(..., support_curator=True) (Curator's 4-byte layout).
  counter-add:X       kazoo's Counter of X's type (an int, or a float when X has a '.'; default 0 of
                      that type): each client adds X ITERATIONS times, logged as above.
"""
import os
import random
import sys
import threading
import time

from kazoo.client import KazooClient
from kazoo.exceptions import LockTimeout


def main(argv):
    usage = ("usage: kazoo_peer.py CONNECT PATH WHO LOG ITERATIONS HOLD_MS CLIENTS "
             "[lock|election|semaphore:N|party|shallow-party|double-barrier:N|tree|counter|counter:curator|counter-add:X]")
    mode = argv[8] if len(argv) == 9 else "lock"
    known = mode in ("lock", "election", "party", "shallow-party", "tree", "counter", "counter:curator") or mode.startswith(("semaphore:", "double-barrier:", "counter-add:"))
    if len(argv) not in (8, 9) or not known:
        print(usage, file=sys.stderr)
        return 64
    connect, path, who, log_path = argv[1], argv[2], argv[3], argv[4]
    iterations, hold, count = int(argv[5]), int(argv[6]) / 1000.0, int(argv[7])
    max_leases = int(mode.split(":", 1)[1]) if mode.startswith("semaphore:") else None
    log = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def record(event, name, token=None):
        suffix = "" if token is None else f" {token}"
        os.write(log, f"{event} {name} {time.monotonic_ns()}{suffix}\n".encode("ascii"))

    clients = []
    for _ in range(count):
        client = KazooClient(hosts=connect, timeout=10.0)
        client.start(timeout=30)
        clients.append(client)
    print("READY", flush=True)
    sys.stdin.readline()
    if mode in ("party", "shallow-party"):
        return run_party(clients, path, who, iterations, mode)

    failures = []
    churn = iterations == 0
    stopping = threading.Event()
    if churn:
        def wait_for_stop():
            sys.stdin.readline()
            stopping.set()
        threading.Thread(target=wait_for_stop, daemon=True).start()

    def rounds():
        """The sections' numbers: ITERATIONS of them, or (churn) until told to stop."""
        n = 0
        while (not stopping.is_set()) if churn else n < iterations:
            yield n
            n += 1

    def acquired(recipe):
        """Acquires a Lock or Semaphore; in churn mode a second at a time, so that a stop is heard."""
        if not churn:
            return recipe.acquire()
        try:
            return recipe.acquire(timeout=1.0)
        except LockTimeout:
            return False

    def section(name, enter, body):
        """One critical section; in churn mode an error is reported and the client goes on."""
        try:
            enter(body)
        except Exception as error:
            if not churn:
                raise
            print(f"RETRY {name} {error!r}", flush=True)
            stopping.wait(0.2)
        if churn:
            stopping.wait(random.uniform(0, max(hold, 0.0)))

    def run(index):
        name = f"{who}-{index}"
        try:
            if mode == "election":
                client = clients[index]
                election = client.Election(path, name)

                def lead():
                    token = client.exists(path + "/" + election.lock.node).czxid
                    record("ENTER", name, token)
                    time.sleep(hold)
                    record("EXIT", name)

                if not churn:
                    for _ in range(iterations):
                        election.run(lead)
                    return

                def elected(body):  # Election.run, a second at a time so that a stop is heard
                    if not acquired(election.lock):
                        return
                    try:
                        body()
                    finally:
                        election.lock.release()

                for _ in rounds():
                    section(name, elected, lead)
                return
            if max_leases is not None:
                client = clients[index]
                semaphore = client.Semaphore(path, name, max_leases=max_leases)

                def leased(body):
                    if not acquired(semaphore):
                        return
                    try:
                        body()
                    finally:
                        semaphore.release()

                def lease_held():
                    stat = client.exists(semaphore.create_path)
                    record("ENTER", name, stat.czxid if stat else -1)
                    if hold < 0:
                        print(f"HOLDING {name}", flush=True)
                        threading.Event().wait()  # until killed
                    time.sleep(hold)
                    record("EXIT", name)

                for _ in rounds():
                    section(name, leased, lease_held)
                return
            if mode.startswith("double-barrier:"):
                barrier = clients[index].DoubleBarrier(path, int(mode.split(":", 1)[1]), identifier=name)
                barrier.enter()
                record("ENTER", name)
                time.sleep(hold)
                barrier.leave()
                record("EXIT", name)
                return
            if mode == "tree":
                client = clients[index]
                for k in range(iterations):
                    node = f"{path}/{name}-{k}"
                    client.create(node, b"c", makepath=True)
                    time.sleep(hold)
                    client.set(node, b"s")
                    time.sleep(hold)
                    if k % 2:
                        client.delete(node)
                        time.sleep(hold)
                return
            if mode.startswith("counter"):
                amount = 1
                if mode.startswith("counter-add:"):
                    text = mode.split(":", 1)[1]
                    amount = float(text) if "." in text else int(text)
                counter = clients[index].Counter(path, default=type(amount)(),
                                                 support_curator=mode == "counter:curator")
                for _ in range(iterations):
                    counter += amount
                    record("ADD", name, counter.post_value)
                return
            lock = clients[index].Lock(path, name, extra_lock_patterns=["-lock-"])

            def locked(body):
                if not acquired(lock):
                    return
                try:
                    body()
                finally:
                    lock.release()

            def lock_held():
                record("ENTER", name)
                time.sleep(hold)
                record("EXIT", name)

            for _ in rounds():
                section(name, locked, lock_held)
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


def run_party(clients, path, who, expected, mode):
    parties = []
    for index, client in enumerate(clients):
        kind = client.Party if mode == "party" else client.ShallowParty
        party = kind(path, f"{who}-{index}")
        party.join()
        parties.append(party)
    seen = []
    for _ in range(300):
        seen = sorted(parties[0])
        if len(seen) == expected:
            break
        time.sleep(0.1)
    print("MEMBERS " + ",".join(seen) if len(seen) == expected else f"ERROR saw {seen}", flush=True)
    sys.stdin.readline()
    for party in parties:
        party.leave()
    for client in clients:
        client.stop()
        client.close()
    print("DONE", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
