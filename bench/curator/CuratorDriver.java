// SPDX-License-Identifier: Apache-2.0
// Benchmark driver for Curator's InterProcessMutex (Debian's libcurator-recipes-java).
//
// Takes the same command line as the C++ drivers and prints the same JSON lines (see
// bench/driver_common.hpp). Scenarios: uncontended, contended, herd, heartbeat. bench/compare compiles it at
// bench time against the jars in /usr/share/java.
import java.io.BufferedReader;
import java.io.FileWriter;
import java.io.IOException;
import java.io.InputStreamReader;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.RetryNTimes;

public final class CuratorDriver {
  private String connect;
  private String path;
  private String scenario;
  private int iterations = 1000;
  private int warmup = 100;
  private double durationSeconds = 5;
  private double maxWarmupSeconds = 10;
  private int contenders = 2;
  private int sessionTimeoutMs = 10000;
  private String samplesFile;

  public static void main(String[] argv) throws Exception {
    CuratorDriver driver = new CuratorDriver();
    driver.parse(argv);
    switch (driver.scenario) {
      case "uncontended": driver.runUncontended(); break;
      case "contended": driver.runContended(); break;
      case "herd": driver.runHerd(); break;
      case "heartbeat": driver.runHeartbeat(); break;
      default:
        System.err.println("curator driver: scenario '" + driver.scenario
            + "' is not one of uncontended, contended, herd, heartbeat");
        System.exit(2);
    }
    System.exit(0);  // Curator's and ZooKeeper's non-daemon threads would keep the JVM alive
  }

  private void parse(String[] argv) {
    for (int i = 0; i < argv.length; i += 2) {
      if (i + 1 >= argv.length) usage("option " + argv[i] + " needs a value");
      String value = argv[i + 1];
      try {
        switch (argv[i]) {
          case "--connect": connect = value; break;
          case "--path": path = value; break;
          case "--scenario": scenario = value; break;
          case "--iterations": iterations = Integer.parseInt(value); break;
          case "--warmup": warmup = Integer.parseInt(value); break;
          case "--duration": durationSeconds = Double.parseDouble(value); break;
          case "--max-warmup": maxWarmupSeconds = Double.parseDouble(value); break;
          case "--contenders": contenders = Integer.parseInt(value); break;
          case "--session-timeout-ms": sessionTimeoutMs = Integer.parseInt(value); break;
          case "--trials": break;
          case "--samples": samplesFile = value; break;
          default: usage("unknown option " + argv[i]);
        }
      } catch (NumberFormatException e) {
        usage("option " + argv[i] + " needs a number, not '" + value + "'");
      }
    }
    if (connect == null || path == null || scenario == null) usage("--connect, --path and --scenario are required");
    if (iterations < 1 || warmup < 0 || contenders < 1 || durationSeconds <= 0 || maxWarmupSeconds < 0) {
      usage("--iterations, --contenders and --duration must be positive, --warmup and --max-warmup"
          + " not negative");
    }
  }

  private static void usage(String problem) {
    System.err.println("curator driver: " + problem);
    System.exit(2);
  }

  private CuratorFramework newClient() throws InterruptedException {
    CuratorFramework client = CuratorFrameworkFactory.newClient(
        connect, sessionTimeoutMs, 15000, new RetryNTimes(3, 100));
    client.start();
    if (!client.blockUntilConnected(20, TimeUnit.SECONDS)) {
      System.err.println("curator driver: no session with " + connect + " within 20 s");
      System.exit(1);
    }
    return client;
  }

  private void deleteTree() throws Exception {
    try (CuratorFramework client = newClient()) {
      client.delete().deletingChildrenIfNeeded().forPath(path);
    } catch (org.apache.zookeeper.KeeperException.NoNodeException ignored) {
      // already gone
    }
  }

  private void emit(Map<String, Object> fields) {
    StringBuilder line = new StringBuilder("{\"driver\":\"curator\",\"scenario\":\"" + scenario + "\"");
    for (Map.Entry<String, Object> field : fields.entrySet()) {
      line.append(",\"").append(field.getKey()).append("\":");
      Object value = field.getValue();
      if (value instanceof Double) line.append(String.format(Locale.ROOT, "%.3f", (Double) value));
      else line.append(value);
    }
    System.out.println(line.append('}'));
    System.out.flush();
  }

  private static double percentile(double[] sorted, double fraction) {
    int rank = (int) Math.ceil(fraction * sorted.length);
    rank = Math.max(1, Math.min(rank, sorted.length));
    return sorted[rank - 1];
  }

  private Map<String, Object> latencySummary(double[] samples) throws IOException {
    if (samplesFile != null) {
      try (FileWriter out = new FileWriter(samplesFile)) {
        for (double sample : samples) out.write(String.format(Locale.ROOT, "%.3f%n", sample));
      }
    }
    double[] sorted = samples.clone();
    Arrays.sort(sorted);
    double sum = 0;
    for (double sample : sorted) sum += sample;
    Map<String, Object> fields = new LinkedHashMap<>();
    fields.put("n", sorted.length);
    fields.put("p50_us", percentile(sorted, 0.50));
    fields.put("p90_us", percentile(sorted, 0.90));
    fields.put("p99_us", percentile(sorted, 0.99));
    fields.put("min_us", sorted[0]);
    fields.put("max_us", sorted[sorted.length - 1]);
    fields.put("mean_us", sum / sorted.length);
    return fields;
  }

  // Each close waits for the server's reply: close a hundred sessions side by side, not in turn.
  private static void closeAll(List<CuratorFramework> clients) throws InterruptedException {
    List<Thread> closers = new ArrayList<>();
    for (CuratorFramework client : clients) {
      Thread closer = new Thread(client::close);
      closers.add(closer);
      closer.start();
    }
    for (Thread closer : closers) closer.join(30000);
  }

  private void runUncontended() throws Exception {
    double[] samples = new double[iterations];
    try (CuratorFramework client = newClient()) {
      InterProcessMutex mutex = new InterProcessMutex(client, path);
      for (int round = 0; round < warmup + iterations; ++round) {
        long start = System.nanoTime();
        mutex.acquire();
        mutex.release();
        if (round >= warmup) samples[round - warmup] = (System.nanoTime() - start) / 1000.0;
      }
    }
    emit(latencySummary(samples));
    deleteTree();
  }

  // As bench/driver_common.hpp's measure_steady_rate: the contenders run on while this waits for
  // two consecutive 250 ms windows whose rates agree within 10% (after at least --warmup grants, at
  // most --max-warmup seconds: the JIT's warm-up is not measured), then counts --duration. Returns {warm-up
  // seconds, grants measured, measured seconds}.
  private double[] measureSteadyRate(AtomicLong grants) throws InterruptedException {
    long started = System.nanoTime();
    long windowStart = started;
    long windowStartGrants = grants.get();
    double previousRate = -1;
    while (System.nanoTime() - started < (long) (maxWarmupSeconds * 1e9)) {
      TimeUnit.MILLISECONDS.sleep(250);
      long now = System.nanoTime();
      long count = grants.get();
      double rate = (count - windowStartGrants) / ((now - windowStart) / 1e9);
      boolean agrees = previousRate > 0
          && Math.abs(rate - previousRate) <= 0.10 * Math.max(rate, previousRate);
      if (agrees && count >= warmup) break;
      previousRate = rate;
      windowStart = now;
      windowStartGrants = count;
    }
    long measuredFrom = System.nanoTime();
    long grantsBefore = grants.get();
    TimeUnit.NANOSECONDS.sleep((long) (durationSeconds * 1e9));
    long measuredTo = System.nanoTime();
    return new double[] {(measuredFrom - started) / 1e9, grants.get() - grantsBefore,
                         (measuredTo - measuredFrom) / 1e9};
  }

  private void runContended() throws Exception {
    List<CuratorFramework> clients = new ArrayList<>();
    List<InterProcessMutex> mutexes = new ArrayList<>();
    for (int i = 0; i < contenders; ++i) {
      clients.add(newClient());
      mutexes.add(new InterProcessMutex(clients.get(i), path));
    }
    AtomicInteger inside = new AtomicInteger();
    AtomicLong overlaps = new AtomicLong();
    AtomicLong grants = new AtomicLong();
    List<Thread> threads = new ArrayList<>();
    for (InterProcessMutex mutex : mutexes) {
      Thread thread = new Thread(() -> {
        try {
          while (!Thread.currentThread().isInterrupted()) {
            mutex.acquire();  // interrupted at the end: Curator deletes its node and throws
            if (inside.incrementAndGet() != 1) overlaps.incrementAndGet();
            inside.decrementAndGet();
            mutex.release();
            grants.incrementAndGet();
          }
        } catch (InterruptedException e) {
          // the measured interval ended while waiting
        } catch (Exception e) {
          if (!Thread.currentThread().isInterrupted()) e.printStackTrace();
        }
      });
      threads.add(thread);
      thread.start();
    }
    double[] run = measureSteadyRate(grants);
    for (Thread thread : threads) thread.interrupt();
    for (Thread thread : threads) thread.join(60000);
    Map<String, Object> fields = new LinkedHashMap<>();
    fields.put("contenders", contenders);
    fields.put("acquisitions", (long) run[1]);
    fields.put("duration_s", run[2]);
    fields.put("throughput_per_s", run[1] / run[2]);
    fields.put("warmup_s", run[0]);
    fields.put("overlaps", overlaps.get());
    fields.put("grants_total", grants.get());
    emit(fields);
    closeAll(clients);
    deleteTree();
  }

  private void runHerd() throws Exception {
    CuratorFramework observer = newClient();
    InterProcessMutex holder = new InterProcessMutex(observer, path);
    holder.acquire();
    List<CuratorFramework> clients = new ArrayList<>();
    for (int i = 0; i < contenders; ++i) clients.add(newClient());
    AtomicInteger inside = new AtomicInteger();
    AtomicLong overlaps = new AtomicLong();
    AtomicLong granted = new AtomicLong();
    List<Thread> threads = new ArrayList<>();
    for (CuratorFramework client : clients) {
      InterProcessMutex waiter = new InterProcessMutex(client, path);
      Thread thread = new Thread(() -> {
        try {
          if (!waiter.acquire(120, TimeUnit.SECONDS)) return;
          granted.incrementAndGet();
          if (inside.incrementAndGet() != 1) overlaps.incrementAndGet();
          inside.decrementAndGet();
          waiter.release();
        } catch (Exception e) {
          e.printStackTrace();
        }
      });
      threads.add(thread);
      thread.start();
    }
    for (int polls = 0; observer.getChildren().forPath(path).size() < contenders + 1; ++polls) {
      if (polls > 3000) usage("herd: waiters did not all queue within 60 s");
      Thread.sleep(20);
    }
    long start = System.nanoTime();
    holder.release();
    for (Thread thread : threads) thread.join(120000);
    double drainMs = (System.nanoTime() - start) / 1e6;
    Map<String, Object> fields = new LinkedHashMap<>();
    fields.put("waiters", contenders);
    fields.put("releases", contenders + 1);
    fields.put("granted", granted.get());
    fields.put("client_wakeups", "null");  // Curator's predecessor watcher is private
    fields.put("drain_ms", drainMs);
    fields.put("overlaps", overlaps.get());
    emit(fields);
    closeAll(clients);
    observer.close();
    deleteTree();
  }

  // Sessions each holding a lock of their own, idle until a line on stdin (driver_common.hpp's
  // hold_until_told).
  private void runHeartbeat() throws Exception {
    List<CuratorFramework> clients = new ArrayList<>();
    List<InterProcessMutex> mutexes = new ArrayList<>();
    for (int i = 0; i < contenders; ++i) {
      clients.add(newClient());
      mutexes.add(new InterProcessMutex(clients.get(i), String.format(Locale.ROOT, "%s/l%04d", path, i)));
      mutexes.get(i).acquire();
    }
    Map<String, Object> holding = new LinkedHashMap<>();
    holding.put("holding", contenders);
    emit(holding);
    new BufferedReader(new InputStreamReader(System.in)).readLine();
    Map<String, Object> fields = new LinkedHashMap<>();
    fields.put("sessions", contenders);
    emit(fields);
    for (InterProcessMutex mutex : mutexes) mutex.release();
    closeAll(clients);
    deleteTree();
  }
}
