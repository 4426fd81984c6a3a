// SPDX-License-Identifier: Apache-2.0
// bench/cache_compare's driver for Curator's CuratorCache (Debian's libcurator-recipes-java):
//
//   java -cp CLASSES:curator-recipes.jar:slf4j-nop.jar CacheDriver CONNECT ROOT NODES
//
// Prints "LOADED <ms> <heap bytes added> <nodes cached>" once the initial load is complete, waits
// for a line on stdin, then "EVENTS <updates seen> <seconds from first to last>" once it has seen
// NODES updates (or 60 s passed). Memory is the heap in use after a GC, before and after the load:
// a JVM's resident size says more about its heap sizing than about the cache.
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.cache.CuratorCache;
import org.apache.curator.framework.recipes.cache.CuratorCacheListener;
import org.apache.curator.retry.RetryNTimes;

public final class CacheDriver {
  // The least heap in use over a few collections: one System.gc() is only a request.
  private static long heapInUse() throws InterruptedException {
    Runtime runtime = Runtime.getRuntime();
    long least = Long.MAX_VALUE;
    for (int i = 0; i < 5; ++i) {
      System.gc();
      Thread.sleep(50);
      least = Math.min(least, runtime.totalMemory() - runtime.freeMemory());
    }
    return least;
  }

  public static void main(String[] argv) throws Exception {
    final long nodes = Long.parseLong(argv[2]);
    CuratorFramework client = CuratorFrameworkFactory.builder().connectString(argv[0])
        .sessionTimeoutMs(10000).connectionTimeoutMs(10000).retryPolicy(new RetryNTimes(10, 200)).build();
    client.start();
    client.blockUntilConnected(30, TimeUnit.SECONDS);
    final AtomicLong updates = new AtomicLong();
    final AtomicLong first = new AtomicLong();
    final AtomicLong last = new AtomicLong();
    final CountDownLatch loaded = new CountDownLatch(1);
    final long heapBefore = heapInUse();
    final long start = System.nanoTime();
    CuratorCache cache = CuratorCache.build(client, argv[1]);
    cache.listenable().addListener(CuratorCacheListener.builder()
        .forChanges((before, after) -> {
          long now = System.nanoTime();
          if (updates.getAndIncrement() == 0) first.set(now);
          last.set(now);
        })
        .forInitialized(loaded::countDown)
        .build());
    cache.start();
    loaded.await(5, TimeUnit.MINUTES);
    final double loadMs = (System.nanoTime() - start) / 1e6;
    final long heapAdded = heapInUse() - heapBefore;
    System.out.printf("LOADED %.1f %d %d%n", loadMs, heapAdded, cache.size());
    System.out.flush();
    new BufferedReader(new InputStreamReader(System.in)).readLine();
    final long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
    while (updates.get() < nodes && System.nanoTime() < deadline) Thread.sleep(5);
    System.out.printf("EVENTS %d %.3f%n", updates.get(), (last.get() - first.get()) / 1e9);
    System.out.flush();
    cache.close();
    client.close();
    System.exit(0);
  }
}
