// SPDX-License-Identifier: Apache-2.0
// A Curator (Debian's libcurator-recipes-java) participant for the interoperability tests.
//
//   java -cp CLASSES:curator-recipes.jar:slf4j-nop.jar CuratorPeer CONNECT PATH MODE WHO LOG ITERATIONS HOLD_MS CLIENTS
//
// MODE is mutex (InterProcessMutex), leader (LeaderSelector with auto-requeue), latch (LeaderLatch:
// each term is a new latch, started, awaited, held and closed), rw (InterProcessReadWriteLock: even
// clients write, odd ones read), or semaphore:N (InterProcessSemaphoreV2 with N leases; each ENTER
// line carries the lease's token, the czxid of its lease node; HOLD_MS -1 holds the first lease
// until killed), or tree (each client writes ITERATIONS nodes PATH/<name>-<k> one change at a time,
// HOLD_MS apart: creates it with "c", sets "s", deletes it when k is odd; nothing is logged; for
// the cache tests), or multi (InterProcessMultiLock over the comma-separated paths of PATH, taken in
// the order given). Starts CLIENTS clients (one
// session each, named WHO-0, WHO-1, ...; in rw mode WHO-w0, WHO-r1, ...),
// prints "READY" once all are connected, waits for a line on stdin, then each client enters its
// critical section ITERATIONS times. Around each one it appends "ENTER <name> <ns>" and
// "EXIT <name> <ns>" to LOG (System.nanoTime, CLOCK_MONOTONIC on Linux), each line with one
// O_APPEND write. Prints "DONE" and exits when every client is done.
//
// ITERATIONS 0 is the churn mode: every client goes on until a second line (or the end) of stdin,
// then leaves and "DONE" is printed. Errors a client meets (a lost connection while the test
// restarts a server) are printed as "RETRY <name> <error>" and the client goes on. In leader and
// latch modes each ENTER line also carries the term's fencing token, the czxid of the client's election node
// (as this library's tokens), so that a checker can tell overlapping terms apart by token.
//
// Added modes: group (each client a GroupMember named WHO-i with the payload "data-WHO-i"; once the
// first client counts ITERATIONS members it prints "MEMBERS <id>=<data>,..." sorted by id, and the
// clients leave at the next line on stdin; in churn mode each client joins, stays up to HOLD_MS,
// leaves and stays out up to HOLD_MS, again and again, logging "JOIN <name> <ns>" and
// "LEAVE <name> <ns>"), double-barrier:N (each client enters a
// DistributedDoubleBarrier of N participants, logs ENTER, waits HOLD_MS, leaves and logs EXIT; one
// round), sharedcount (SharedCount, started with seed 0; each add a trySetCount on the version read,
// again until it succeeds) and atomiclong (DistributedAtomicLong.increment()): each client adds 1
// ITERATIONS times to the counter at PATH and appends "ADD <name> <ns> <value written>" to LOG;
// HOLD_MS is ignored (atomiclong's churn mode: each client increments, idles up to HOLD_MS and goes
// on, each call logged as described at its code). sharedcount-set:V (SharedCount.setCount) and atomiclong-set:V
// (DistributedAtomicLong.forceSet): the first client writes V to the counter at PATH once,
// appends "SET <name> <ns> V" to LOG and the peer exits (for tests of what bytes a value makes).
import java.io.BufferedReader;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.barriers.DistributedDoubleBarrier;
import org.apache.curator.framework.recipes.nodes.GroupMember;
import org.apache.curator.framework.recipes.atomic.AtomicValue;
import org.apache.curator.framework.recipes.atomic.DistributedAtomicLong;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.framework.recipes.leader.LeaderSelector;
import org.apache.curator.framework.recipes.leader.LeaderSelectorListenerAdapter;
import org.apache.curator.framework.recipes.locks.InterProcessLock;
import org.apache.curator.framework.recipes.locks.InterProcessMultiLock;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.framework.recipes.locks.Lease;
import org.apache.curator.framework.recipes.shared.SharedCount;
import org.apache.curator.framework.recipes.shared.VersionedValue;
import org.apache.curator.retry.RetryNTimes;
import org.apache.zookeeper.KeeperException;
import org.apache.zookeeper.data.Stat;

public final class CuratorPeer {
  private static FileOutputStream log;

  private static synchronized void record(String event, String who) throws IOException {
    // One write call per line: with O_APPEND the line lands whole, after every earlier one.
    log.write((event + " " + who + " " + System.nanoTime() + "\n").getBytes(StandardCharsets.US_ASCII));
  }

  private static synchronized void record(String event, String who, long token) throws IOException {
    log.write((event + " " + who + " " + System.nanoTime() + " " + token + "\n").getBytes(StandardCharsets.US_ASCII));
  }

  private static synchronized void recordCall(String event, String who, long value, long called, boolean unsure)
      throws IOException {
    log.write((event + " " + who + " " + System.nanoTime() + " " + value + " " + called + " " + (unsure ? 1 : 0) + "\n")
                  .getBytes(StandardCharsets.US_ASCII));
  }

  // The czxid of this client's node under `path` (its data is the selector's id), or -1 when it is
  // gone already (leadership lost before we looked).
  private static long ownToken(CuratorFramework client, String path, String name) throws Exception {
    long token = -1;
    for (String child : client.getChildren().forPath(path)) {
      Stat stat = new Stat();
      byte[] data;
      try {
        data = client.getData().storingStatIn(stat).forPath(path + "/" + child);
      } catch (KeeperException.NoNodeException gone) {
        continue;
      }
      if (name.equals(new String(data, StandardCharsets.UTF_8))) token = Math.max(token, stat.getCzxid());
    }
    return token;
  }

  // A client's loop in churn mode, given a random source of its own: an error it cannot go on from
  // is printed as "ERROR <name> ...", and the client counts as done either way.
  private interface ChurnLoop {
    void run(java.util.Random random) throws Exception;
  }

  private static Thread churnThread(String name, CountDownLatch done, ChurnLoop loop) {
    return new Thread(() -> {
      try {
        loop.run(new java.util.Random());
      } catch (Exception e) {
        System.out.println("ERROR " + name + " " + e);
      } finally {
        done.countDown();
      }
    });
  }

  // Sleeps up to `holdMs` (at random), ending early once `stopping` is set.
  private static void idle(java.util.Random random, long holdMs, AtomicBoolean stopping) throws InterruptedException {
    final long until = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(1 + random.nextInt((int) Math.max(1, holdMs)));
    while (!stopping.get() && System.nanoTime() < until) Thread.sleep(20);
  }

  private static void setCounter(CuratorFramework client, String path, String who, String mode) throws Exception {
    final long value = Long.parseLong(mode.substring(mode.indexOf(':') + 1));
    if (mode.startsWith("sharedcount-set:")) {
      SharedCount count = new SharedCount(client, path, 0);
      count.start();
      try {
        count.setCount(Math.toIntExact(value));
      } finally {
        count.close();
      }
    } else {
      new DistributedAtomicLong(client, path, new RetryNTimes(10, 10)).forceSet(value);
    }
    record("SET", who + "-0", value);
    System.out.println("DONE");
    System.out.flush();
    client.close();
    System.exit(0);
  }

  public static void main(String[] argv) throws Exception {
    if (argv.length != 8) {
      System.err.println("usage: CuratorPeer CONNECT PATH MODE WHO LOG ITERATIONS HOLD_MS CLIENTS");
      System.exit(64);
    }
    final String connect = argv[0];
    final String path = argv[1];
    final String mode = argv[2];
    final String who = argv[3];
    log = new FileOutputStream(argv[4], true);
    final int iterations = Integer.parseInt(argv[5]);
    final long holdMs = Long.parseLong(argv[6]);
    final int clientCount = Integer.parseInt(argv[7]);

    List<CuratorFramework> clients = new ArrayList<>();
    for (int i = 0; i < clientCount; ++i) {
      CuratorFramework client = CuratorFrameworkFactory.builder().connectString(connect)
          .sessionTimeoutMs(10000).connectionTimeoutMs(10000).retryPolicy(new RetryNTimes(10, 200)).build();
      client.start();
      if (!client.blockUntilConnected(30, TimeUnit.SECONDS)) {
        System.out.println("ERROR cannot connect to " + connect);
        System.exit(1);
      }
      clients.add(client);
    }
    System.out.println("READY");
    System.out.flush();
    final BufferedReader stdin = new BufferedReader(new InputStreamReader(System.in));
    stdin.readLine();
    if (mode.equals("group") && iterations > 0) runGroup(clients, path, who, iterations, stdin);
    if (mode.startsWith("sharedcount-set:") || mode.startsWith("atomiclong-set:")) setCounter(clients.get(0), path, who, mode);
    if (mode.startsWith("double-barrier:"))
      runDoubleBarrier(clients, path, who, Integer.parseInt(mode.substring("double-barrier:".length())), holdMs);

    final boolean churn = iterations == 0;
    final AtomicBoolean stopping = new AtomicBoolean(false);
    final AtomicInteger leading = new AtomicInteger(0);  // leader mode: clients inside a term
    final CountDownLatch done = new CountDownLatch(clientCount);
    List<Thread> threads = new ArrayList<>();
    List<LeaderSelector> selectors = new ArrayList<>();
    for (int i = 0; i < clientCount; ++i) {
      final CuratorFramework client = clients.get(i);
      final boolean writer = i % 2 == 0;
      final String name = mode.equals("rw") ? who + "-" + (writer ? "w" : "r") + i : who + "-" + i;
      if (mode.equals("leader")) {
        final int[] terms = {0};
        final LeaderSelector[] self = new LeaderSelector[1];
        self[0] = new LeaderSelector(client, path, new LeaderSelectorListenerAdapter() {
          @Override
          public void takeLeadership(CuratorFramework unused) throws Exception {
            leading.incrementAndGet();  // before the check, so that stopping waits for this term
            try {
              if (churn && stopping.get()) return;
              if (!churn && terms[0] >= iterations) return;  // done: hand on at once until closed
              final long token = ownToken(client, path, name);
              if (token < 0) return;  // lost already
              record("ENTER", name, token);
              try {
                Thread.sleep(holdMs);  // interrupted when the connection is suspended or lost
              } finally {
                record("EXIT", name);
              }
            } finally {
              leading.decrementAndGet();
            }
            if (++terms[0] == iterations) {
              done.countDown();
              new Thread(() -> self[0].close()).start();  // leave the election
            }
          }
        });
        self[0].setId(name);
        self[0].autoRequeue();
        selectors.add(self[0]);
        continue;
      }
      if (mode.equals("latch")) {
        Thread thread = new Thread(() -> {
          try {
            for (int n = 0; n < iterations; ++n) {
              LeaderLatch latch = new LeaderLatch(client, path, name);
              latch.start();
              try {
                latch.await();
                final long token = ownToken(client, path, name);
                record("ENTER", name, token);
                Thread.sleep(holdMs);
                record("EXIT", name);
              } finally {
                latch.close();  // deletes our node: the next participant leads
              }
            }
          } catch (Exception e) {
            System.out.println("ERROR " + name + " " + e);
          } finally {
            done.countDown();
          }
        });
        threads.add(thread);
        continue;
      }
      if (mode.startsWith("semaphore:")) {
        final int maxLeases = Integer.parseInt(mode.substring("semaphore:".length()));
        threads.add(new Thread(() -> {
          try {
            InterProcessSemaphoreV2 semaphore = new InterProcessSemaphoreV2(client, path, maxLeases);
            semaphore.setNodeData(name.getBytes(StandardCharsets.UTF_8));
            for (int n = 0; n < iterations; ++n) {
              Lease lease = semaphore.acquire();
              try {
                Stat stat = client.checkExists().forPath(path + "/leases/" + lease.getNodeName());
                record("ENTER", name, stat == null ? -1 : stat.getCzxid());
                if (holdMs < 0) {
                  System.out.println("HOLDING " + name);
                  System.out.flush();
                  Thread.sleep(Long.MAX_VALUE);  // until killed
                }
                Thread.sleep(holdMs);
                record("EXIT", name);
              } finally {
                semaphore.returnLease(lease);
              }
            }
          } catch (Exception e) {
            System.out.println("ERROR " + name + " " + e);
          } finally {
            done.countDown();
          }
        }));
        continue;
      }
      if (mode.equals("tree")) {
        threads.add(new Thread(() -> {
          try {
            for (int n = 0; n < iterations; ++n) {
              final String node = path + "/" + name + "-" + n;
              client.create().creatingParentsIfNeeded().forPath(node, "c".getBytes(StandardCharsets.UTF_8));
              Thread.sleep(holdMs);
              client.setData().forPath(node, "s".getBytes(StandardCharsets.UTF_8));
              Thread.sleep(holdMs);
              if (n % 2 == 1) {
                client.delete().forPath(node);
                Thread.sleep(holdMs);
              }
            }
          } catch (Exception e) {
            System.out.println("ERROR " + name + " " + e);
          } finally {
            done.countDown();
          }
        }));
        continue;
      }
      if (mode.equals("group")) {
        // Churn: joins as WHO-i with the payload "data-WHO-i", stays, leaves, stays out; each for
        // up to HOLD_MS, logged as JOIN and LEAVE lines.
        threads.add(churnThread(name, done, random -> {
          while (!stopping.get()) {
            GroupMember member = new GroupMember(client, path, name, ("data-" + name).getBytes(StandardCharsets.UTF_8));
            member.start();
            record("JOIN", name);
            idle(random, holdMs, stopping);
            member.close();
            record("LEAVE", name);
            idle(random, holdMs, stopping);
          }
        }));
        continue;
      }
      if (mode.equals("atomiclong") && churn) {
        // Churn: one increment, idle up to HOLD_MS, again. Each call is logged as
        // "ADD <name> <ns> <value written> <ns called> <unsure>" or, when it failed,
        // "LOST <name> <ns> 0 <ns called> 1" (it may have written nothing, or once). Unsure (1): the
        // connection changed state meanwhile, and Curator's retry of a write whose reply was lost
        // may have added once more, unseen.
        final AtomicBoolean troubled = new AtomicBoolean(false);
        client.getConnectionStateListenable().addListener((unused, state) -> troubled.set(true));
        final DistributedAtomicLong value = new DistributedAtomicLong(client, path, new RetryNTimes(10000, 1));
        threads.add(churnThread(name, done, random -> {
          while (!stopping.get()) {
            troubled.set(false);
            final long called = System.nanoTime();
            try {
              AtomicValue<Long> result = value.increment();
              if (result.succeeded()) recordCall("ADD", name, result.postValue(), called, troubled.get());
              else recordCall("LOST", name, 0, called, true);
            } catch (Exception e) {
              recordCall("LOST", name, 0, called, true);
              System.out.println("RETRY " + name + " " + e);
            }
            idle(random, holdMs, stopping);
          }
        }));
        continue;
      }
      if (mode.equals("sharedcount") || mode.equals("atomiclong")) {
        threads.add(new Thread(() -> {
          try {
            if (mode.equals("sharedcount")) {
              SharedCount count = new SharedCount(client, path, 0);
              count.start();
              try {
                for (int n = 0; n < iterations; ++n) {
                  for (;;) {
                    VersionedValue<Integer> seen = count.getVersionedValue();
                    if (count.trySetCount(seen, seen.getValue() + 1)) {
                      record("ADD", name, seen.getValue() + 1);
                      break;
                    }
                  }
                }
              } finally {
                count.close();
              }
            } else {
              DistributedAtomicLong value = new DistributedAtomicLong(client, path, new RetryNTimes(10000, 1));
              for (int n = 0; n < iterations; ++n) {
                AtomicValue<Long> result = value.increment();
                if (!result.succeeded()) throw new IllegalStateException("increment gave up");
                record("ADD", name, result.postValue());
              }
            }
          } catch (Exception e) {
            System.out.println("ERROR " + name + " " + e);
          } finally {
            done.countDown();
          }
        }));
        continue;
      }
      Thread thread = new Thread(() -> {
        try {
          InterProcessLock mutex;
          if (mode.equals("mutex")) mutex = new InterProcessMutex(client, path);
          else if (mode.equals("rw") && writer) mutex = new InterProcessReadWriteLock(client, path).writeLock();
          else if (mode.equals("rw")) mutex = new InterProcessReadWriteLock(client, path).readLock();
          else if (mode.equals("multi")) mutex = new InterProcessMultiLock(client, Arrays.asList(path.split(",")));
          else throw new IllegalArgumentException("unknown mode " + mode);
          for (int n = 0; churn ? !stopping.get() : n < iterations; ++n) {
            if (churn) {
              try {
                if (!mutex.acquire(1, TimeUnit.SECONDS)) continue;
              } catch (Exception e) {
                System.out.println("RETRY " + name + " " + e);
                Thread.sleep(100);
                continue;
              }
            } else {
              mutex.acquire();
            }
            try {
              record("ENTER", name);
              Thread.sleep(holdMs);
              record("EXIT", name);
            } finally {
              try {
                mutex.release();
              } catch (Exception e) {
                if (!churn) throw e;
                System.out.println("RETRY " + name + " " + e);  // the node goes with the session
              }
            }
          }
        } catch (Exception e) {
          System.out.println("ERROR " + name + " " + e);
        } finally {
          done.countDown();
        }
      });
      threads.add(thread);
    }
    for (LeaderSelector selector : selectors) selector.start();
    for (Thread thread : threads) thread.start();
    if (churn) {
      // Until the test says stop (a line or the end of stdin); an hour at most.
      Thread reader = new Thread(() -> {
        try {
          stdin.readLine();
        } catch (IOException ignored) {
          // the end of stdin is the signal as well
        }
        stopping.set(true);
      });
      reader.setDaemon(true);
      reader.start();
      reader.join(TimeUnit.HOURS.toMillis(1));
      stopping.set(true);
      if (!selectors.isEmpty()) {
        // Let a running term end and log its EXIT before the selectors close.
        for (int wait = 0; wait < 100 && leading.get() > 0; ++wait) Thread.sleep(100);
        for (int i = 0; i < clientCount; ++i) done.countDown();
      }
    }
    boolean finished = done.await(60, TimeUnit.SECONDS);
    for (LeaderSelector selector : selectors) {
      try {
        selector.close();
      } catch (IllegalStateException alreadyClosed) {
        // closed when its last term ended
      }
    }
    for (CuratorFramework client : clients) client.close();
    System.out.println(finished ? "DONE" : "ERROR timed out");
    System.out.flush();
    System.exit(finished ? 0 : 1);  // Curator's and ZooKeeper's threads would keep the JVM alive
  }

  private static void runGroup(List<CuratorFramework> clients, String path, String who, int expected,
                               BufferedReader stdin) throws Exception {
    List<GroupMember> members = new ArrayList<>();
    for (int i = 0; i < clients.size(); ++i) {
      GroupMember member = new GroupMember(clients.get(i), path, who + "-" + i,
                                           ("data-" + who + "-" + i).getBytes(StandardCharsets.UTF_8));
      member.start();
      members.add(member);
    }
    String seen = null;
    for (int wait = 0; wait < 300 && seen == null; ++wait) {
      Map<String, byte[]> current = new TreeMap<>(members.get(0).getCurrentMembers());
      if (current.size() == expected) {
        StringBuilder line = new StringBuilder();
        for (Map.Entry<String, byte[]> entry : current.entrySet()) {
          if (line.length() > 0) line.append(',');
          line.append(entry.getKey()).append('=').append(new String(entry.getValue(), StandardCharsets.UTF_8));
        }
        seen = line.toString();
      } else {
        Thread.sleep(100);
      }
    }
    System.out.println(seen == null ? "ERROR members not seen" : "MEMBERS " + seen);
    System.out.flush();
    stdin.readLine();
    for (GroupMember member : members) member.close();
    for (CuratorFramework client : clients) client.close();
    System.out.println("DONE");
    System.out.flush();
    System.exit(0);
  }

  private static void runDoubleBarrier(List<CuratorFramework> clients, String path, String who, int participants,
                                       long holdMs) throws Exception {
    final AtomicBoolean failed = new AtomicBoolean(false);
    List<Thread> threads = new ArrayList<>();
    for (int i = 0; i < clients.size(); ++i) {
      final CuratorFramework client = clients.get(i);
      final String name = who + "-" + i;
      Thread thread = new Thread(() -> {
        try {
          DistributedDoubleBarrier barrier = new DistributedDoubleBarrier(client, path, participants);
          if (!barrier.enter(30, TimeUnit.SECONDS)) throw new IllegalStateException("enter timed out");
          record("ENTER", name);
          Thread.sleep(holdMs);
          if (!barrier.leave(30, TimeUnit.SECONDS)) throw new IllegalStateException("leave timed out");
          record("EXIT", name);
        } catch (Exception e) {
          failed.set(true);
          System.out.println("ERROR " + name + " " + e);
        }
      });
      thread.start();
      threads.add(thread);
    }
    for (Thread thread : threads) thread.join(TimeUnit.SECONDS.toMillis(70));
    for (CuratorFramework client : clients) client.close();
    System.out.println(failed.get() ? "ERROR" : "DONE");
    System.out.flush();
    System.exit(failed.get() ? 1 : 0);
  }
}
