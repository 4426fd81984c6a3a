// A Curator (Debian's libcurator-recipes-java) participant for the interoperability tests.
//
//   java -cp CLASSES:curator-recipes.jar:slf4j-nop.jar CuratorPeer CONNECT PATH MODE WHO LOG ITERATIONS HOLD_MS CLIENTS
//
// MODE is mutex (InterProcessMutex), leader (LeaderSelector with auto-requeue), or rw
// (InterProcessReadWriteLock: even clients write, odd ones read). Starts CLIENTS clients (one
// session each, named WHO-0, WHO-1, ...; in rw mode WHO-w0, WHO-r1, ...),
// prints "READY" once all are connected, waits for a line on stdin, then each client enters its
// critical section ITERATIONS times. Around each one it appends "ENTER <name> <ns>" and
// "EXIT <name> <ns>" to LOG (System.nanoTime, CLOCK_MONOTONIC on Linux), each line with one
// O_APPEND write. Prints "DONE" and exits when every client is done.
import java.io.BufferedReader;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.leader.LeaderSelector;
import org.apache.curator.framework.recipes.leader.LeaderSelectorListenerAdapter;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.retry.RetryNTimes;

public final class CuratorPeer {
  private static FileOutputStream log;

  private static synchronized void record(String event, String who) throws IOException {
    // One write call per line: with O_APPEND the line lands whole, after every earlier one.
    log.write((event + " " + who + " " + System.nanoTime() + "\n").getBytes(StandardCharsets.US_ASCII));
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
    new BufferedReader(new InputStreamReader(System.in)).readLine();

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
            if (terms[0] >= iterations) return;  // done: hand on at once until closed
            record("ENTER", name);
            Thread.sleep(holdMs);
            record("EXIT", name);
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
      Thread thread = new Thread(() -> {
        try {
          InterProcessMutex mutex;
          if (mode.equals("mutex")) mutex = new InterProcessMutex(client, path);
          else if (mode.equals("rw") && writer) mutex = new InterProcessReadWriteLock(client, path).writeLock();
          else if (mode.equals("rw")) mutex = new InterProcessReadWriteLock(client, path).readLock();
          else throw new IllegalArgumentException("unknown mode " + mode);
          for (int n = 0; n < iterations; ++n) {
            mutex.acquire();
            try {
              record("ENTER", name);
              Thread.sleep(holdMs);
              record("EXIT", name);
            } finally {
              mutex.release();
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
}
