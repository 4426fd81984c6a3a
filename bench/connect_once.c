/* SPDX-License-Identifier: Apache-2.0 */
/* The floor for `zklock LOCK -- true`: a C program that connects, creates an ephemeral sequential
 * lock node, runs `true` (fork, exec, wait) while the node stands, deletes it and closes the
 * session: what any wrapper must do at the least. bench/compare times whole runs of it.
 *
 *   zkr_bench_connect_once CONNECT_STRING LOCK_PATH
 *
 * The lock path's parent must exist (the path itself is made if missing). Exit status 0 on success,
 * 1 with a message on stderr otherwise. */
#include <zookeeper/zookeeper.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t connected_mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t connected_cond = PTHREAD_COND_INITIALIZER;
static int connected = 0;

/* fork, exec `true` from $PATH (as zklock does), wait: 0 once it exited 0. */
static int run_true(void) {
  pid_t child = fork();
  if (child < 0) return -1;
  if (child == 0) {
    execlp("true", "true", (char *)NULL);
    _exit(127);
  }
  int status = 0;
  if (waitpid(child, &status, 0) != child) return -1;
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

static void session_watcher(zhandle_t *zh, int type, int state, const char *path, void *context) {
  (void)zh, (void)path, (void)context;
  if (type != ZOO_SESSION_EVENT) return;
  pthread_mutex_lock(&connected_mutex);
  connected = state == ZOO_CONNECTED_STATE;
  pthread_cond_broadcast(&connected_cond);
  pthread_mutex_unlock(&connected_mutex);
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s CONNECT_STRING LOCK_PATH\n", argv[0]);
    return 2;
  }
  zoo_set_debug_level(ZOO_LOG_LEVEL_ERROR);
  zhandle_t *zh = zookeeper_init(argv[1], session_watcher, 10000, NULL, NULL, 0);
  if (zh == NULL) {
    fprintf(stderr, "zookeeper_init %s failed\n", argv[1]);
    return 1;
  }
  /* As the library does by default: no resolver call at every poll of the socket. */
  zoo_set_servers_resolution_delay(zh, 10000);
  struct timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += 15;
  pthread_mutex_lock(&connected_mutex);
  while (!connected) {
    if (pthread_cond_timedwait(&connected_cond, &connected_mutex, &deadline) != 0) break;
  }
  int is_connected = connected;
  pthread_mutex_unlock(&connected_mutex);
  if (!is_connected) {
    fprintf(stderr, "no session with %s within 15 s\n", argv[1]);
    zookeeper_close(zh);
    return 1;
  }
  char prefix[1024];
  snprintf(prefix, sizeof prefix, "%s/_c_00000000-0000-0000-0000-000000000000-lock-", argv[2]);
  char created[1100];
  struct Stat stat;
  int rc = zoo_create2(zh, prefix, "", 0, &ZOO_OPEN_ACL_UNSAFE, ZOO_EPHEMERAL_SEQUENTIAL, created,
                       sizeof created, &stat);
  if (rc == ZNONODE) {
    /* zklock makes the lock path a container, which the server removes once it has stood empty for
     * a while (between two runs, say): make it again, as zklock would, and try once more. */
    rc = zoo_create(zh, argv[2], "", 0, &ZOO_OPEN_ACL_UNSAFE, ZOO_CONTAINER, NULL, 0);
    if (rc == ZOK || rc == ZNODEEXISTS)
      rc = zoo_create2(zh, prefix, "", 0, &ZOO_OPEN_ACL_UNSAFE, ZOO_EPHEMERAL_SEQUENTIAL, created,
                       sizeof created, &stat);
  }
  int job_failed = 0;
  if (rc == ZOK) {
    job_failed = run_true() != 0;
    if (job_failed) fprintf(stderr, "true: did not run and exit 0\n");
    rc = zoo_delete(zh, created, -1);
  }
  if (rc != ZOK) fprintf(stderr, "%s: %s\n", prefix, zerror(rc));
  zookeeper_close(zh);
  return rc == ZOK && !job_failed ? 0 : 1;
}
