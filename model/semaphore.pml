/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The semaphore's promotion protocol: the server, N lease holders already granted when the model
 * starts, and NC clients each running the contender queue of recipes/contender_queue.cpp with
 * QueuePolicy{max_holders = N} (decide(): the first N nodes hold, the first two waiters watch the
 * children, every later waiter watches the two nodes before it; a contender touches its node when
 * it becomes the first waiter and when it is granted). docs/MODEL.md maps every step to the code
 * and says what is abstracted away.
 *
 * Configuration (-D on spin's command line, see model/check):
 *   N         leases (2 or 3)             NC       clients (2 to 4)
 *   DROPS     connection drops            DEATHS   clients that die (or freeze for ever) at any point
 *   DEADNODE  the node of a client that died or froze for ever is queued first behind the holders
 *             (the first waiter, touched or not), before any client queues
 *   EXPIRY    the session of a dead client (or of the dead node) may end at the server, which
 *             deletes its node, at any point (or never: nothing forces it)
 *   OWN_WATCH_TIMER  a holder sets its own-node watch a moment after the grant
 *             (schedule_own_node_watch_locked); without it, only waiters watching their
 *             predecessors set it (watch_locked). It catches a deletion by someone else, which
 *             this model leaves to lock.pml; it is here for its meeting with the touch's resend.
 *   LIVENESS  the ltl claim "every client that does not die is granted" is checked (with DEADNODE
 *             too: a dead node that never goes away must not starve anyone)
 * Broken variants, which must be caught (model/check expects their violation):
 *   NO_TOUCH_RECHECK   a waiter whose watch shows an already touched predecessor waits on the
 *                      watch instead of looking again (watch_locked, watch_second_blocker_locked)
 *   TOUCH_NOT_RESENT   a grant's touch lost with the connection is not sent again (touch_locked)
 */

#ifndef N
#define N 2
#endif
#ifndef NC
#define NC 3
#endif
#ifndef DROPS
#define DROPS 0
#endif
#ifndef DEATHS
#define DEATHS 0
#endif

#ifdef DEADNODE
#define FIRST_CLIENT_SLOT (N + 1)
#else
#define FIRST_CLIENT_SLOT N
#endif
/* node slots; slot i has sequence number i: slots 0..N-1 are the holders', slot N the dead node's */
#define MAXN (FIRST_CLIENT_SLOT + NC + DROPS)
#define DEAD_SESSION (NC + 1)  /* the dead node's session (client c's is c + 1; the holders' 0) */
#define NONE 255
#define QLEN 10

/* ---- the server ---- */
byte live;               /* bit i: node slot i exists under the semaphore's path */
byte version[MAXN];      /* its data version (a touch is a conditional setData) */
byte owner[MAXN];        /* its ephemeralOwner: client c's session is c + 1; the holders' are 0 */
byte guid[MAXN];         /* the GUID in its name (per create attempt, see begin_locked) */
byte nextslot = FIRST_CLIENT_SLOT;  /* the parent's sequence counter */
bool sess_alive[NC + 2];
byte dw[NC];             /* bit i: client c has a data watch on slot i registered at the server */
bool cw[NC];             /* client c has a children watch on the path registered at the server */

/* ---- what the clients believe (global so that the properties can read it) ---- */
#define CREATING 2
#define RECOVERING 3
#define CHECKING 4
#define WATCHING 5
#define HELD 6
#define RELEASING 7
#define FINISHED 9
byte phase[NC];
byte mynode[NC];         /* node_path_ (a slot) or NONE */
bool connected[NC];
bool dead[NC];           /* the process died or froze for ever: it takes no step any more */
byte grants[NC];
byte holders_left;       /* bit h: the lease holder h (slot h) still holds; it only releases */
byte done;               /* clients that finished */
byte drops_left = DROPS;
byte deaths_left = DEATHS;

/* Requests travel in order on a client's connection; replies and watch events come back in order. */
#define R_CREATE 1
#define R_GETCH 2      /* getChildren, no watch (the pipelined listing, check_locked) */
#define R_CHILDW 3     /* getChildren with a watch (watch_children_locked) */
#define R_RECOVER 4    /* sync + getChildren (recover_locked) */
#define R_EXISTS 5
#define R_DATA_OWN 6   /* getData with watch on our own node (watch_own_node_locked) */
#define R_DATA_BLK 7   /* getData with watch on the blocker (watch_locked) */
#define R_DATA_SEC 8   /* getData with watch on the node before it (watch_second_blocker_locked) */
#define R_TOUCH_FW 9   /* setData(version 0): the first waiter's touch (touch_as_first_waiter_locked) */
#define R_TOUCH 10     /* setData(version v): the grant's touch, two of them (touch_locked) */
#define R_DELETE 11
#define R_DELETE_FF 12 /* fire-and-forget delete of a create we no longer track (on_created) */
#define EV_DATA 20     /* a data watch fired: arg = node, arg2 = 1 if deleted, 0 if changed */
#define EV_CHILD 21    /* a children watch fired */

#define OK 0
#define NONODE 1
#define CLOSS 2        /* connection loss */
#define BADVERSION 3
#define SESSEXP 4

chan req[NC] = [QLEN] of { byte, byte, byte, byte };       /* op, attempt, arg, arg2 */
chan rep[NC] = [QLEN] of { byte, byte, byte, byte, byte }; /* op, rc, attempt, arg, arg2 */

/* The number of live nodes before slot x: a contender's index in the sorted queue. */
#define BIT(m, i) (((m) >> (i)) & 1)
#define COUNT8(m) (BIT(m,0) + BIT(m,1) + BIT(m,2) + BIT(m,3) + BIT(m,4) + BIT(m,5) + BIT(m,6) + BIT(m,7))
#define INDEX(listing, x) COUNT8((listing) & ((1 << (x)) - 1))

/* SessionCore::issue: a request on a connection that is down fails at once with connection loss. */
inline send(c, op, att, arg, arg2) {
  if
  :: connected[c] -> req[c]!op, att, arg, arg2
  :: else -> rep[c]!op, CLOSS, att, arg, 0
  fi
}

/* A reply or an event for client x (a dead client reads nothing; what it is sent is lost). */
inline deliver(x, op, rc, att, arg, arg2) {
  if
  :: dead[x] -> skip
  :: else -> assert(len(rep[x]) < QLEN); rep[x]!op, rc, att, arg, arg2
  fi
}

/* The server fires the data watches on node i, once each. */
inline fire_data(i, deleted) {
  k = 0;
  do
  :: k < NC ->
     if
     :: dw[k] & (1 << i) -> dw[k] = dw[k] & ~(1 << i); deliver(k, EV_DATA, OK, 0, i, deleted)
     :: else -> skip
     fi;
     k++
  :: else -> break
  od
}

/* ... and the children watches on the path (a create or a delete under it), once each. */
inline fire_children() {
  k = 0;
  do
  :: k < NC ->
     if
     :: cw[k] -> cw[k] = false; deliver(k, EV_CHILD, OK, 0, 0, 0)
     :: else -> skip
     fi;
     k++
  :: else -> break
  od
}

inline server_delete(i) {
  live = live & ~(1 << i);
  fire_data(i, 1);
  fire_children()
}

/* The server runs one request of client x's connection: requests of a connection run in order. */
inline serve(x) {
  req[x]?op, att, arg, arg2;
  if
  :: !sess_alive[x + 1] -> deliver(x, op, SESSEXP, att, arg, 0)
  :: else ->
  if
  :: op == R_CREATE ->
     assert(nextslot < MAXN);
     i = nextslot; nextslot++;
     live = live | (1 << i); owner[i] = x + 1; guid[i] = arg; version[i] = 0;
     fire_children();
     deliver(x, op, OK, att, i, 0)
  :: op == R_GETCH || op == R_RECOVER -> deliver(x, op, OK, att, live, 0)
  :: op == R_CHILDW -> cw[x] = true; deliver(x, op, OK, att, live, 0)
  :: op == R_EXISTS ->
     if
     :: live & (1 << arg) -> deliver(x, op, OK, att, arg, owner[arg])
     :: else -> deliver(x, op, NONODE, att, arg, 0)
     fi
  :: op == R_DATA_OWN || op == R_DATA_BLK || op == R_DATA_SEC ->
     if
     :: live & (1 << arg) -> dw[x] = dw[x] | (1 << arg); deliver(x, op, OK, att, arg, version[arg])
     :: else -> deliver(x, op, NONODE, att, arg, 0)
     fi
  :: op == R_TOUCH_FW || op == R_TOUCH ->  /* setData(node, data, expected version arg2) */
     if
     :: !(live & (1 << arg)) -> deliver(x, op, NONODE, att, arg, 0)
     :: (live & (1 << arg)) && version[arg] != arg2 -> deliver(x, op, BADVERSION, att, arg, 0)
     :: (live & (1 << arg)) && version[arg] == arg2 ->
        version[arg]++; fire_data(arg, 0); deliver(x, op, OK, att, arg, 0)
     fi
  :: op == R_DELETE || op == R_DELETE_FF ->
     if
     :: live & (1 << arg) -> server_delete(arg); deliver(x, op, OK, att, arg, 0)
     :: else -> deliver(x, op, NONODE, att, arg, 0)
     fi
  fi
  fi
}

#define SERVE(x) \
  :: atomic { nempty(req[x]) -> serve(x); op = 0; att = 0; arg = 0; arg2 = 0; i = 0; k = 0 }

/* The server ends a dead (or frozen) client's session: it stopped hearing from it. Its node goes.
 * (It may also never end within the bounds: nothing forces this step.) */
#define SESSION_ENDS(x) \
  :: atomic { dead[x] && sess_alive[x + 1] -> \
       sess_alive[x + 1] = false; \
       j = 0; \
       do \
       :: j < MAXN -> \
          if :: (live & (1 << j)) && owner[j] == x + 1 -> server_delete(j) :: else -> skip fi; j++ \
       :: else -> break \
       od; \
       j = 0; k = 0 }

/* The lease holders at the start: each holds its node (slot h, already touched to version 2) and
 * at some point releases it (Contender::release: remove_node_locked; the delete is done at once).
 * They release in slot order: which of them goes first makes no difference to the waiters (the
 * first two watch the children, the others watch waiters only). */
#define RELEASES(h) \
  :: atomic { (holders_left & ((1 << (h + 1)) - 1)) == (1 << h) -> \
       holders_left = holders_left & ~(1 << h); server_delete(h); k = 0 }

active proctype Server() {
  byte op, att, arg, arg2, i, j, k;
  end_server:
  do
  SERVE(0)
  SERVE(1)
#if NC > 2
  SERVE(2)
#endif
#if NC > 3
  SERVE(3)
#endif
  RELEASES(0)
  RELEASES(1)
#if N > 2
  RELEASES(2)
#endif
#ifdef EXPIRY
#ifdef DEADNODE
  :: atomic { sess_alive[DEAD_SESSION] -> sess_alive[DEAD_SESSION] = false; server_delete(N); k = 0 }
#endif
  SESSION_ENDS(0)
  SESSION_ENDS(1)
#if NC > 2
  SESSION_ENDS(2)
#endif
#if NC > 3
  SESSION_ENDS(3)
#endif
#endif
  od
}

/* The functions of Contender a step runs: each step sets `call` to the first, and the trampoline
 * below runs them (a function that calls another sets `call` again), all in one atomic step as
 * the code runs each completion and watch under the session mutex. */
#define F_NONE 0
#define F_BEGIN 1
#define F_CHECK 2
#define F_RECOVER 3
#define F_EVALUATE 4
#define F_WATCH 5
#define F_GRANT 6
#define F_REMOVE 7
#define F_WATCH_OWN 8
#define F_TROUBLE 9
#define F_RECONNECTED 10
#define F_FINISH 11
#define F_TOUCH 12

#define RETRY_NONE 0
#define RETRY_RECOVER 1
#define RETRY_CHECK 2
#define RETRY_REMOVE 3
#define RETRY_TOUCH 4
#define RETRY_WATCH_OWN 5
#define OW_NONE 0
#define OW_PENDING 1
#define OW_SET 2

/* first_sight_of_touch_locked: touches_seen_ as two bit sets, (node, version 1) and (node, 2+) */
#define SEEN(x, v) (((v) == 1 -> seen1 : seen2) & (1 << (x)))
#define MARK_SEEN(x, v) if :: (v) == 1 -> seen1 = seen1 | (1 << (x)) :: else -> seen2 = seen2 | (1 << (x)) fi

/* One client: one contender (Contender) on one session, and the job that holds a lease and then
 * releases it. */
proctype Client(byte c) {
  byte op, rc, att, arg, arg2;
  byte call, attempt, myguid, blk, sec, blk_att, chw_att, retry, own_watch, i, j, k, n, listing;
  byte seen1, seen2;
  bool gbd, blk_reg, sec_reg, chw_reg, fw_touch_sent, own_timer, carries;

  atomic {
    sess_alive[c + 1] = true; connected[c] = true
  }
  /* Contender::start. The clients queue in the order of their numbers (they are alike, so every
   * other order is the same run with the clients renamed); anything may happen in between. Once a
   * client died, the others start at any point (a dead client's create may never run). */
  atomic { (nextslot >= FIRST_CLIENT_SLOT + c || deaths_left < DEATHS) -> call = F_BEGIN }

  do
  :: atomic {
     !dead[c] ->
     if
     :: call != F_NONE -> skip  /* Contender::start: begin_locked */
     /* ---- a reply or a watch event, in the order the connection delivers them ---- */
     :: rep[c]?op, rc, att, arg, arg2 ->
        if
        :: op == EV_DATA ->  /* every watcher registered for the node is called */
           if
           :: arg == mynode[c] && own_watch == OW_SET ->
              /* the watcher of watch_own_node_locked: a change (our own touch) re-arms it */
              own_watch = OW_NONE;
              if
              :: arg2 ->  /* our own delete (own_node_gone_locked: nothing to do); a live
                           * client's node goes only that way */
                 assert(phase[c] == RELEASING || phase[c] == FINISHED)
              :: !arg2 && (phase[c] == HELD || phase[c] == WATCHING) -> call = F_WATCH_OWN
              :: else -> skip
              fi
           :: arg == blk && blk_reg && blk_att == attempt && phase[c] == WATCHING ->
              /* the blocker's watcher (watch_locked): granted by its deletion, or look again */
              if
              :: arg2 && gbd -> call = F_GRANT
              :: else -> call = F_CHECK
              fi
           :: arg == sec && sec_reg && blk_att == attempt && phase[c] == WATCHING ->
              call = F_CHECK  /* the second blocker's watcher: wake_to_check */
           :: else -> skip  /* a watcher of an older attempt: ignored */
           fi
        :: op == EV_CHILD ->  /* watch_children_locked's watcher: wake_to_check */
           if
           :: chw_reg && chw_att == attempt && phase[c] == WATCHING -> call = F_CHECK
           :: else -> skip
           fi
        :: op == R_CREATE ->  /* Contender::on_created */
           if
           :: att != attempt || phase[c] != CREATING ->
              /* a create we no longer track that took effect: delete it */
              if
              :: rc == OK && connected[c] && arg != mynode[c] -> send(c, R_DELETE_FF, 0, arg, 0)
              :: else -> skip
              fi
           :: else ->
              if
              :: rc == OK -> mynode[c] = arg  /* the pipelined listing decides */
              :: else -> j = RETRY_RECOVER; call = F_TROUBLE
              fi
           fi
        :: op == R_GETCH ->  /* Contender::on_children */
           if
           :: att != attempt || (phase[c] != CREATING && phase[c] != CHECKING) || mynode[c] == NONE -> skip
           :: else ->
              phase[c] = CHECKING;
              if
              :: rc == OK -> listing = arg; carries = false; call = F_EVALUATE
              :: else -> j = RETRY_CHECK; call = F_TROUBLE
              fi
           fi
        :: op == R_CHILDW ->  /* watch_children_locked's reply: evaluated with the watch it set */
           if
           :: att != attempt || phase[c] != WATCHING -> skip
           :: else ->
              if
              :: rc == OK -> chw_reg = true; listing = arg; carries = true; call = F_EVALUATE
              :: else -> j = RETRY_CHECK; call = F_TROUBLE
              fi
           fi
        :: op == R_RECOVER ->  /* recover_locked: the listing behind the sync */
           if
           :: att != attempt || phase[c] != RECOVERING -> skip
           :: att == attempt && phase[c] == RECOVERING && rc != OK -> j = RETRY_RECOVER; call = F_TROUBLE
           :: att == attempt && phase[c] == RECOVERING && rc == OK ->
              i = 0; k = NONE;
              do
              :: i < MAXN ->
                 if :: (arg & (1 << i)) && guid[i] == c * 16 + myguid -> k = i :: else -> skip fi; i++
              :: else -> break
              od;
              if
              :: k == NONE -> call = F_BEGIN  /* the create never happened */
              :: else -> send(c, R_EXISTS, attempt, k, 0)
              fi
           fi
        :: op == R_EXISTS ->  /* recover_locked: adopt only a node whose ephemeralOwner is this session */
           if
           :: att != attempt || phase[c] != RECOVERING -> skip
           :: else ->
              if
              :: rc == OK && arg2 == c + 1 -> mynode[c] = arg; call = F_CHECK
              :: rc == NONODE || (rc == OK && arg2 != c + 1) -> call = F_BEGIN
              :: else -> j = RETRY_RECOVER; call = F_TROUBLE
              fi
           fi
        :: op == R_DATA_OWN ->  /* watch_own_node_locked's reply (still_this_node) */
           if
           :: arg != mynode[c] -> skip
           :: arg == mynode[c] && rc == OK -> own_watch = OW_SET
           :: arg == mynode[c] && rc != OK ->
              own_watch = OW_NONE;
              /* our node is deleted only with our session, or by us */
              assert(rc != NONODE || phase[c] == RELEASING || phase[c] == FINISHED);
              if
              :: rc == CLOSS && phase[c] == HELD && retry != RETRY_TOUCH -> j = RETRY_WATCH_OWN; call = F_TROUBLE
              :: else -> skip  /* a pending touch resends this watch; a waiter's blocker watch fails too */
              fi
           fi
        :: op == R_DATA_BLK ->  /* watch_locked's reply */
           if
           :: att != attempt || phase[c] != WATCHING -> skip
           :: att == attempt && phase[c] == WATCHING && rc == OK && arg2 > 0 ->
              /* a touched predecessor was promoted before our watch was set: look again, once per touch */
#ifdef NO_TOUCH_RECHECK
              blk_reg = true
#else
              blk_reg = true;  /* the watch is set too (a stale one once we look again) */
              if
              :: !SEEN(arg, arg2) -> MARK_SEEN(arg, arg2); call = F_CHECK  /* first_sight_of_touch_locked */
              :: else -> skip
              fi
#endif
           :: att == attempt && phase[c] == WATCHING && rc == OK && arg2 == 0 ->
              blk_reg = true  /* watch set; wait for it */
           :: att == attempt && phase[c] == WATCHING && rc == NONODE ->  /* gone already: ours, or look again */
              if
              :: gbd -> call = F_GRANT
              :: else -> call = F_CHECK
              fi
           :: att == attempt && phase[c] == WATCHING && rc == CLOSS -> j = RETRY_CHECK; call = F_TROUBLE
           fi
        :: op == R_DATA_SEC ->  /* watch_second_blocker_locked's reply */
           if
           :: att != attempt || phase[c] != WATCHING -> skip
           :: att == attempt && phase[c] == WATCHING && rc == OK ->
              sec_reg = true;
#ifndef NO_TOUCH_RECHECK
              if
              :: arg2 > 0 && !SEEN(arg, arg2) -> MARK_SEEN(arg, arg2); call = F_CHECK
              :: else -> skip
              fi
#endif
           :: att == attempt && phase[c] == WATCHING && rc == NONODE -> call = F_CHECK
           :: att == attempt && phase[c] == WATCHING && rc == CLOSS ->
              skip  /* anything else reaches the blocker's watch too, which handles it */
           fi
        :: op == R_TOUCH ->  /* touch_locked's reply */
           if
           :: rc == OK || rc == NONODE || rc == BADVERSION -> skip
           :: phase[c] != HELD -> skip  /* released: the delete wakes the successor */
#ifdef TOUCH_NOT_RESENT
           :: else -> skip
#else
           :: else -> j = RETRY_TOUCH; call = F_TROUBLE
#endif
           fi
        :: op == R_TOUCH_FW ->  /* touch_as_first_waiter_locked's reply */
           if
           :: rc == OK || rc == NONODE || rc == BADVERSION -> skip
           :: phase[c] != CHECKING && phase[c] != WATCHING -> skip  /* granted (its touch covers this) */
           :: else -> fw_touch_sent = false; j = RETRY_CHECK; call = F_TROUBLE
           fi
        :: op == R_DELETE ->  /* remove_node_locked's reply */
           if
           :: att != attempt || phase[c] != RELEASING -> skip
           :: else ->
              if
              :: rc == OK || rc == NONODE -> call = F_FINISH
              :: else -> j = RETRY_REMOVE; call = F_TROUBLE
              fi
           fi
        :: op == R_DELETE_FF -> skip
        fi

     /* the job releases its lease (Contender::release of a held lease) */
     :: phase[c] == HELD -> call = F_REMOVE

#ifdef OWN_WATCH_TIMER
     /* schedule_own_node_watch_locked's timer */
     :: phase[c] == HELD && own_timer -> own_timer = false; call = F_WATCH_OWN
#endif

     /* fault: the process dies, or freezes for ever; its session lives until the server ends it */
     :: deaths_left > 0 -> deaths_left--; dead[c] = true

     /* fault: the connection drops; unanswered requests fail with connection loss */
     :: drops_left > 0 && connected[c] ->
        drops_left--; connected[c] = false;
        /* replies not yet read fail (a watch such a reply carried is not registered); requests
         * not yet run never run; watch events come again after the reconnect (set-watches) */
        n = len(rep[c]); i = 0;
        do
        :: i < n ->
           rep[c]?op, rc, att, arg, arg2;
           if
           :: op == EV_DATA || op == EV_CHILD -> rep[c]!op, rc, att, arg, arg2
           :: else ->
              if
              :: (op == R_DATA_OWN || op == R_DATA_BLK || op == R_DATA_SEC) && rc == OK ->
                 dw[c] = dw[c] & ~(1 << arg)
              :: op == R_CHILDW && rc == OK -> cw[c] = false
              :: else -> skip
              fi;
              rep[c]!op, CLOSS, att, arg, 0
           fi;
           i++
        :: else -> break
        od;
        do
        :: req[c]?op, att, arg, arg2 -> rep[c]!op, CLOSS, att, arg, 0
        :: empty(req[c]) -> break
        od
     /* the connection comes back on the same session (on_connection_event: connected) */
     :: !connected[c] -> connected[c] = true; call = F_RECONNECTED

     /* this acquisition is over */
     :: phase[c] == FINISHED && empty(req[c]) && empty(rep[c]) ->
        done++;
        /* nothing of this contender matters any more */
        attempt = 0; myguid = 0; blk = 0; sec = 0; blk_att = 0; chw_att = 0; retry = 0; own_watch = 0;
        seen1 = 0; seen2 = 0; gbd = false; blk_reg = false; sec_reg = false; chw_reg = false;
        fw_touch_sent = false; own_timer = false; mynode[c] = NONE; dw[c] = 0; cw[c] = false;
        goto end_client
     fi;

     do
     :: call == F_NONE -> break

     :: call == F_BEGIN ->  /* Contender::begin_locked */
        call = F_NONE;
        phase[c] = CREATING; retry = RETRY_NONE; mynode[c] = NONE; own_watch = OW_NONE;
        seen1 = 0; seen2 = 0; fw_touch_sent = false;  /* touches_seen_, first_waiter_touch_sent_ */
        myguid++;  /* new_guid(): a fresh GUID per attempt */
        attempt++;
        send(c, R_CREATE, attempt, c * 16 + myguid, 0);
        /* the pipelined listing: run after the create, so it already contains our node */
        send(c, R_GETCH, attempt, 0, 0)

     :: call == F_CHECK ->  /* Contender::check_locked */
        call = F_NONE;
        phase[c] = CHECKING; attempt++;
        send(c, R_GETCH, attempt, 0, 0)

     :: call == F_RECOVER ->  /* Contender::recover_locked: sync, then list to find our GUID */
        call = F_NONE;
        phase[c] = RECOVERING; attempt++;
        send(c, R_RECOVER, attempt, 0, 0)

     :: call == F_EVALUATE ->  /* Contender::evaluate_locked(listing, listing_carries_watch) */
        call = F_NONE;
        assert(listing & (1 << mynode[c]));  /* our node goes only with our session */
        n = INDEX(listing, mynode[c]);
        /* decide(): indices 0..N-1 hold; N and N+1 watch the children (N is the first waiter);
         * a later waiter watches the nodes at n-1 (the blocker) and n-2 */
        if
        :: n < N -> call = F_GRANT
        :: n >= N && n <= N + 1 ->
           if
           :: n == N && !fw_touch_sent ->  /* touch_as_first_waiter_locked */
              fw_touch_sent = true; send(c, R_TOUCH_FW, 0, mynode[c], 0)
           :: else -> skip
           fi;
           if
           :: !carries ->  /* watch_children_locked */
              phase[c] = WATCHING; attempt++; chw_att = attempt; chw_reg = false;
              send(c, R_CHILDW, attempt, 0, 0)
           :: else -> skip  /* the listing that set the watch is what the watch guards */
           fi
        :: else ->
           blk = NONE; sec = NONE; i = mynode[c];
           do
           :: i > 0 && sec == NONE ->
              i--;
              if
              :: (listing & (1 << i)) && blk == NONE -> blk = i
              :: (listing & (1 << i)) && blk != NONE -> sec = i
              :: else -> skip
              fi
           :: else -> break
           od;
           gbd = (n - 1 < N);  /* granted_by_its_deletion: decide() without the blocker */
           call = F_WATCH
        fi

     :: call == F_WATCH ->  /* Contender::watch_locked(blocker, ...), then watch_second_blocker_locked */
        call = F_NONE;
        phase[c] = WATCHING;
        /* watch_own_node_locked, sent before the blocker's watch */
        if
        :: own_watch == OW_NONE -> own_watch = OW_PENDING; send(c, R_DATA_OWN, 0, mynode[c], 0)
        :: else -> skip
        fi;
        attempt++; blk_att = attempt; blk_reg = false; sec_reg = false;
        send(c, R_DATA_BLK, attempt, blk, 0);
        send(c, R_DATA_SEC, attempt, sec, 0)  /* the same attempt: whichever fires first re-checks */

     :: call == F_GRANT ->  /* Contender::grant_locked (deadline_verdict_locked: alive, the model having no time) */
        call = F_NONE;
        phase[c] = HELD; grants[c]++;
        call = F_TOUCH;
        own_timer = true  /* schedule_own_node_watch_locked */

     :: call == F_TOUCH ->  /* Contender::touch_locked: setData(version 0), then setData(version 1) */
        call = F_NONE;
        send(c, R_TOUCH, 0, mynode[c], 0);
        send(c, R_TOUCH, 0, mynode[c], 1)

     :: call == F_REMOVE ->  /* Contender::remove_node_locked: retried through connection loss */
        call = F_NONE;
        phase[c] = RELEASING; retry = RETRY_NONE;
        if
        :: !connected[c] -> retry = RETRY_REMOVE
        :: else -> attempt++; send(c, R_DELETE, attempt, mynode[c], 0)
        fi

     :: call == F_WATCH_OWN ->  /* Contender::watch_own_node_locked */
        call = F_NONE;
        if
        :: own_watch == OW_NONE && mynode[c] != NONE ->
           own_watch = OW_PENDING; send(c, R_DATA_OWN, 0, mynode[c], 0)
        :: else -> skip
        fi

     :: call == F_TROUBLE ->  /* handle_session_trouble_locked(connection loss, j):
                               * retry_after_reconnect_locked */
        call = F_NONE;
        assert(rc == CLOSS);  /* a live client's session never ends in this model */
        retry = j;
        if :: connected[c] -> call = F_RECONNECTED :: else -> skip fi

     :: call == F_RECONNECTED ->  /* Contender::on_reconnected */
        call = F_NONE;
        if
        :: phase[c] == FINISHED -> skip
        :: else ->
           j = retry; retry = RETRY_NONE;
           if
           :: j == RETRY_RECOVER -> call = F_RECOVER
           :: j == RETRY_CHECK -> call = F_CHECK
           :: j == RETRY_REMOVE -> call = F_REMOVE
           :: j == RETRY_TOUCH && phase[c] == HELD ->
              /* touch_locked, then watch_own_node_locked (sent behind it) */
              send(c, R_TOUCH, 0, mynode[c], 0);
              send(c, R_TOUCH, 0, mynode[c], 1);
              call = F_WATCH_OWN
           :: j == RETRY_WATCH_OWN && phase[c] == HELD -> call = F_WATCH_OWN
           :: else -> skip
           fi
        fi

     :: call == F_FINISH ->  /* Contender::finish_locked */
        call = F_NONE;
        phase[c] = FINISHED; retry = RETRY_NONE
     od;
     /* scratch values carry nothing to the next step */
     op = 0; rc = 0; att = 0; arg = 0; arg2 = 0; i = 0; j = 0; k = 0; n = 0; listing = 0; carries = false
     }
  od;
end_client:
  skip
}

/* ---- properties ---- */

/* Who believes it holds a lease: a holder that has not released, and a client granted whose
 * session lives (a client whose session ended is told by its session monitor before the server
 * ends the session: the lock's model, lock.pml, checks that deadline; here a dead or frozen
 * holder is counted until the server ends its session). */
#define HOLDS(c) (phase[c] == HELD && sess_alive[c + 1])
#if NC == 2
#define CLIENTS_HOLDING (HOLDS(0) + HOLDS(1))
#define QUIET (empty(req[0]) && empty(req[1]))
#define ALL_GRANTED ((grants[0] > 0 || dead[0]) && (grants[1] > 0 || dead[1]))
#elif NC == 3
#define CLIENTS_HOLDING (HOLDS(0) + HOLDS(1) + HOLDS(2))
#define QUIET (empty(req[0]) && empty(req[1]) && empty(req[2]))
#define ALL_GRANTED ((grants[0] > 0 || dead[0]) && (grants[1] > 0 || dead[1]) && (grants[2] > 0 || dead[2]))
#else
#define CLIENTS_HOLDING (HOLDS(0) + HOLDS(1) + HOLDS(2) + HOLDS(3))
#define QUIET (empty(req[0]) && empty(req[1]) && empty(req[2]) && empty(req[3]))
#define ALL_GRANTED ((grants[0] > 0 || dead[0]) && (grants[1] > 0 || dead[1]) && \
                     (grants[2] > 0 || dead[2]) && (grants[3] > 0 || dead[3]))
#endif
#define AT_MOST_N (COUNT8(holders_left) + CLIENTS_HOLDING <= N)

/* An entitled waiter is woken without the dead node's help. Once every client that
 * has not died is idle (connected, nothing to read, no request the server has yet to run: so no
 * touch of theirs is on its way), a client whose node is among the first N nodes does not still
 * wait: it would sleep until a holder releases or a dead node's session ends, or for ever. Holders
 * releasing and sessions ending are the events left out: an entitled waiter needs neither. */
#define IDLE(c) (dead[c] || (phase[c] != 0 && connected[c] && len(req[c]) == 0 && len(rep[c]) == 0))
#define WAITS(c) (!dead[c] && (phase[c] == CREATING || phase[c] == RECOVERING || phase[c] == CHECKING || phase[c] == WATCHING))
#define ENTITLED(c) (mynode[c] != NONE && (live & (1 << mynode[c])) && INDEX(live, mynode[c]) < N)
#define ASLEEP_ENTITLED(c) (WAITS(c) && ENTITLED(c))
#if NC == 2
#define NONE_ASLEEP (!(IDLE(0) && IDLE(1)) || (!ASLEEP_ENTITLED(0) && !ASLEEP_ENTITLED(1)))
#elif NC == 3
#define NONE_ASLEEP (!(IDLE(0) && IDLE(1) && IDLE(2)) || \
                     (!ASLEEP_ENTITLED(0) && !ASLEEP_ENTITLED(1) && !ASLEEP_ENTITLED(2)))
#else
#define NONE_ASLEEP (!(IDLE(0) && IDLE(1) && IDLE(2) && IDLE(3)) || \
                     (!ASLEEP_ENTITLED(0) && !ASLEEP_ENTITLED(1) && !ASLEEP_ENTITLED(2) && !ASLEEP_ENTITLED(3)))
#endif

active proctype AtMostN() {
  atomic { !AT_MOST_N -> assert(AT_MOST_N) }
}

active proctype EntitledAwake() {
  atomic { !NONE_ASLEEP -> assert(NONE_ASLEEP) }
}

/* A released contender leaves no node: once every live client has finished and nothing is in
 * flight, only nodes of dead clients' sessions remain. */
active proctype NoNodeLeft() {
  byte i;
  atomic {
    done + DEATHS - deaths_left == NC && QUIET ->
    i = 0;
    do
    :: i < MAXN ->
       assert(!(live & (1 << i)) || i < FIRST_CLIENT_SLOT || dead[owner[i] - 1]);
       i++
    :: else -> break
    od
  }
}

init {
  byte c;
  atomic {
    assert(MAXN <= 8);  /* node sets are bytes */
    holders_left = (1 << N) - 1;
    live = holders_left;
    c = 0;
    do
    :: c < N -> version[c] = 2; c++  /* granted: touched to version 2 */
    :: else -> break
    od;
#ifdef DEADNODE
    /* the node of a client that died or froze for ever: queued first behind the holders, before
     * or after its first-waiter touch; its session lives until the server ends it (EXPIRY) */
    live = live | (1 << N); owner[N] = DEAD_SESSION; sess_alive[DEAD_SESSION] = true;
    if :: version[N] = 0 :: version[N] = 1 fi;
#endif
    c = 0;
    do
    :: c < NC -> mynode[c] = NONE; run Client(c); c++
    :: else -> break
    od
  }
}

#ifdef LIVENESS
ltl every_live_waiter_granted { <> ALL_GRANTED }
#endif
