#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Benchmark driver for kazoo's Lock (Debian's python3-kazoo), run with /usr/bin/python3.

Takes the same command line as the C++ drivers and prints the same JSON lines; see
bench/driver_common.hpp. Scenarios: uncontended, contended, herd, heartbeat.
"""

import argparse
import json
import logging
import math
import sys
import threading
import time

from kazoo.client import KazooClient
from kazoo.exceptions import CancelledError
from kazoo.recipe.lock import Lock


class CountingLock(Lock):
    """kazoo's Lock, counting how often its predecessor watch fires (the client-side wake-ups)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.wakeups = 0

    def _watch_predecessor(self, event):
        self.wakeups += 1
        super()._watch_predecessor(event)


def parse_args():
    parser = argparse.ArgumentParser(description="kazoo Lock benchmark driver")
    parser.add_argument("--connect", required=True)
    parser.add_argument("--path", required=True)
    parser.add_argument("--scenario", required=True)
    parser.add_argument("--iterations", type=int, default=1000)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--max-warmup", type=float, default=10.0)
    parser.add_argument("--contenders", type=int, default=2)
    parser.add_argument("--session-timeout-ms", type=int, default=10000)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--samples")
    args = parser.parse_args()
    if (args.iterations < 1 or args.warmup < 0 or args.contenders < 1 or args.duration <= 0
            or args.max_warmup < 0):
        parser.error("--iterations, --contenders and --duration must be positive, --warmup and"
                     " --max-warmup not negative")
    return args


def emit(args, **fields):
    line = {"driver": "kazoo", "scenario": args.scenario}
    line.update(fields)
    print(json.dumps(line), flush=True)


def percentile(sorted_samples, fraction):
    if not sorted_samples:
        return 0.0
    rank = min(max(math.ceil(fraction * len(sorted_samples)), 1), len(sorted_samples))
    return sorted_samples[rank - 1]


def latency_summary(args, samples_us):
    if args.samples:
        with open(args.samples, "w") as out:
            out.writelines(f"{sample:.3f}\n" for sample in samples_us)
    ordered = sorted(samples_us)
    return {
        "n": len(ordered),
        "p50_us": percentile(ordered, 0.50),
        "p90_us": percentile(ordered, 0.90),
        "p99_us": percentile(ordered, 0.99),
        "min_us": ordered[0],
        "max_us": ordered[-1],
        "mean_us": sum(ordered) / len(ordered),
    }


def new_client(args):
    client = KazooClient(hosts=args.connect, timeout=args.session_timeout_ms / 1000.0)
    client.start(timeout=20)
    return client


def delete_tree(args):
    client = new_client(args)
    try:
        client.delete(args.path, recursive=True)
    except Exception:  # the subtree may already be gone
        pass
    client.stop()
    client.close()


def run_uncontended(args):
    client = new_client(args)
    client.ensure_path(args.path)
    lock = client.Lock(args.path, "bench")
    samples = []
    for round_index in range(args.warmup + args.iterations):
        start = time.perf_counter()
        lock.acquire()
        lock.release()
        if round_index >= args.warmup:
            samples.append((time.perf_counter() - start) * 1e6)
    emit(args, **latency_summary(args, samples))
    client.stop()
    client.close()
    delete_tree(args)


def measure_steady_rate(args, grants):
    """As bench/driver_common.hpp's measure_steady_rate: the contenders run on while this waits for
    two consecutive 250 ms windows whose rates agree within 10% (after at least --warmup grants, at
    most --max-warmup seconds), then counts --duration. Returns (warm-up seconds, grants measured, seconds)."""
    started = time.monotonic()
    window_start, window_start_grants = started, grants()
    previous_rate = -1.0
    while time.monotonic() - started < args.max_warmup:
        time.sleep(0.25)
        now, count = time.monotonic(), grants()
        rate = (count - window_start_grants) / (now - window_start)
        agrees = previous_rate > 0 and abs(rate - previous_rate) <= 0.10 * max(rate, previous_rate)
        if agrees and count >= args.warmup:
            break
        previous_rate, window_start, window_start_grants = rate, now, count
    measured_from, grants_before = time.monotonic(), grants()
    time.sleep(args.duration)
    measured_to = time.monotonic()
    return measured_from - started, grants() - grants_before, measured_to - measured_from


def run_contended(args):
    clients = [new_client(args) for _ in range(args.contenders)]
    clients[0].ensure_path(args.path)
    locks = [CountingLock(client, args.path, "bench") for client in clients]
    inside = [0]
    overlaps = [0]
    grants = [0]
    counter_guard = threading.Lock()
    stop = threading.Event()

    def contend(lock):
        while not stop.is_set():
            try:
                if not lock.acquire():
                    break
            except CancelledError:
                break
            # Two guarded steps, so that another holder between them is seen.
            with counter_guard:
                inside[0] += 1
                if inside[0] != 1:
                    overlaps[0] += 1
            with counter_guard:
                inside[0] -= 1
            lock.release()
            with counter_guard:
                grants[0] += 1

    threads = [threading.Thread(target=contend, args=(lock,)) for lock in locks]
    for thread in threads:
        thread.start()
    warmup_s, measured, elapsed = measure_steady_rate(args, lambda: grants[0])
    stop.set()
    for lock in locks:
        lock.cancel()
    for thread in threads:
        thread.join(timeout=60)
    emit(args, contenders=args.contenders, acquisitions=measured, duration_s=elapsed,
         throughput_per_s=measured / elapsed, warmup_s=warmup_s, overlaps=overlaps[0],
         grants_total=grants[0])
    for client in clients:
        client.stop()
        client.close()
    delete_tree(args)


def run_herd(args):
    observer = new_client(args)
    observer.ensure_path(args.path)
    holder = observer.Lock(args.path, "holder")
    holder.acquire()
    clients = [new_client(args) for _ in range(args.contenders)]
    waiters = [CountingLock(client, args.path, "waiter") for client in clients]
    granted = [0]
    inside = [0]
    overlaps = [0]
    counter_guard = threading.Lock()

    def wait_then_release(lock):
        if lock.acquire(timeout=120):
            with counter_guard:
                granted[0] += 1
                inside[0] += 1
                if inside[0] != 1:
                    overlaps[0] += 1
            with counter_guard:
                inside[0] -= 1
            lock.release()

    threads = [threading.Thread(target=wait_then_release, args=(lock,)) for lock in waiters]
    for thread in threads:
        thread.start()
    polls = 0
    while len(observer.get_children(args.path)) < len(waiters) + 1:
        polls += 1
        if polls > 3000:
            sys.exit("kazoo driver: herd waiters did not all queue within 60 s")
        time.sleep(0.02)
    start = time.perf_counter()
    holder.release()
    for thread in threads:
        thread.join(timeout=120)
    drain_ms = (time.perf_counter() - start) * 1000
    emit(args, waiters=args.contenders, releases=args.contenders + 1, granted=granted[0],
         client_wakeups=sum(lock.wakeups for lock in waiters), drain_ms=drain_ms, overlaps=overlaps[0])
    for client in clients:
        client.stop()
        client.close()
    observer.stop()
    observer.close()
    delete_tree(args)


def run_heartbeat(args):
    """Sessions each holding a lock of their own, idle until a line on stdin (driver_common.hpp's
    hold_until_told)."""
    clients = [new_client(args) for _ in range(args.contenders)]
    locks = [client.Lock(f"{args.path}/l{index:04}", "bench") for index, client in enumerate(clients)]
    for lock in locks:
        lock.acquire()
    emit(args, holding=args.contenders)
    sys.stdin.readline()
    emit(args, sessions=args.contenders)
    for lock in locks:
        lock.release()
    for client in clients:
        client.stop()
        client.close()
    delete_tree(args)


def main():
    logging.basicConfig(level=logging.ERROR)
    args = parse_args()
    scenarios = {"uncontended": run_uncontended, "contended": run_contended, "herd": run_herd,
                 "heartbeat": run_heartbeat}
    if args.scenario not in scenarios:
        sys.exit(f"kazoo driver: scenario '{args.scenario}' is not one of {sorted(scenarios)}")
    scenarios[args.scenario](args)


if __name__ == "__main__":
    main()
