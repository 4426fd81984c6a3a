/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The lock protocol (the exclusive lock; the read/write lock with RWLOCK): the server, NC clients
 * each running the contender queue of recipes/contender_queue.cpp with the session monitor of
 * src/session_core.cpp, and a fenced resource behind its gate (src/fence_gate.cpp). docs/MODEL.md maps
 * every step to the code and says what is abstracted away.
 *
 * Configuration (-D on spin's command line, see model/check):
 *   NC        clients (2 or 3)            ROUNDS   acquisitions per client
 *   DROPS     connection drops            TPDEL    deletions of any node by a third party
 *   CANCELS   cancels of a waiting client MAXT     last tick (time stops there)
 *   LIVENESS  no faults, no time: the ltl claim "every client is granted" is checked
 *   RWLOCK    each acquisition is a reader or a writer of the ReadWriteLock (decide()'s reader
 *             rule); the property becomes "no writer holds beside any other holder"
 * Broken variants, which must be caught (model/check expects their violation):
 *   OLD_SHORTCUT        watch_locked grants on the blocker's deletion with nothing vouching for its node
 *   GATE_ADMITS_LOWER   the gate admits a token lower than the highest it admitted
 *   STRICT_OVERLAP      also count a holder whose node a third party deleted (the documented window)
 *   RELEASE_NOT_RETRIED remove_node_locked gives up on connection loss instead of retrying
 *   NO_RECHECK          a waiter woken by its blocker's deletion that was not its last obstacle,
 *                       or by its second blocker's, does not look again (check_locked)
 *   GRANT_IN_DOUBT      grant_locked grants while the monitor asks about a deadline it slept
 *                       through (DeadlineVerdict::in_doubt taken for alive)
 */

#ifndef NC
#define NC 2
#endif
#ifndef ROUNDS
#define ROUNDS 1
#endif
#ifndef DROPS
#define DROPS 0
#endif
#ifndef TPDEL
#define TPDEL 0
#endif
#ifndef CANCELS
#define CANCELS 0
#endif
#ifndef MAXT
#define MAXT 0
#endif

#define MAXN 6          /* node slots; slot i has sequence number and czxid i+1 (both grow together) */
#ifndef MAXS
#define MAXS (NC + 3)   /* sessions, ids 1..MAXS-1 (0 = none): two replacement sessions in all */
#endif
#define NONE 255
#define QLEN 8
#define WRITER_MARK 64  /* in a create's GUID argument: the node's name marks a writer */
#define MYGUID(c) (c * 16 + myguid + (writer[c] -> WRITER_MARK : 0))

/* Time, in ticks. T = session timeout; the monitor's deadline is proof + T - MARGIN - LAG. The
 * model has one server, so the forward lag (a follower's delay in telling the leader) is 0; the
 * margin is what remains of SessionCore::margin_for. */
#ifndef T
#define T 3
#endif
#define MARGIN 1
#define LAG 0

/* ---- the server ---- */
byte live;               /* bit i: node slot i exists under the lock path */
byte owner[MAXN];        /* its ephemeralOwner (a session id) */
byte guid[MAXN];         /* the GUID in its name (per create attempt, see begin_locked) */
byte nextslot;           /* the parent's sequence counter */
bool sess_alive[MAXS];
byte lastheard[MAXS];    /* the tick the server last heard from the session */
bool closing[MAXS];      /* the client closed the handle (close_retired_locked); the close is on its way */
byte holders_stopping[MAXS];  /* SessionCore's RetiredConnection::holders_stopping */
byte sess_client[MAXS];
byte nextsid = NC + 1;   /* sessions 1..NC are the clients' first ones */
byte dw[NC];             /* bit i: client c has a data watch on slot i registered at the server */
bool cw[NC];             /* client c has a children watch on the lock path registered at the server */
byte now;

/* ---- what the clients believe (global so that the properties can read it) ---- */
#define IDLE 0
#define WAITSESS 1
#define CREATING 2
#define RECOVERING 3
#define CHECKING 4
#define WATCHING 5
#define HELD 6
#define RELEASING 7
#define LOST 8
#define FINISHED 9
byte phase[NC];
byte mynode[NC];         /* node_path_ (a slot) or NONE */
byte tok[NC];            /* token_: the czxid */
byte sid[NC];            /* the session's current session id (0 while connecting) */
bool connected[NC];
byte proof[NC];          /* last_leader_proof_, in ticks */
byte grants[NC];
bool doubt[NC];          /* the contender's grant waits for the monitor's verdict on a deadline it
                          * slept through (grant_locked: DeadlineVerdict::in_doubt, retry_ =
                          * Retry::check) until on_deadline_renewed or the loss */
byte writers;            /* bit i: node i is named as a writer ("__WRIT__"; "lock-" for the lock) */
bool writer[NC];         /* the client's current contender is a writer (always, for the lock) */
byte tp_deleted_head;    /* bit i: a third party deleted node i while it held, as the server sees
                          * it (nothing before it blocked it): see VALID */
byte done;               /* clients that finished all their rounds */
byte max_admitted;       /* the highest token the resource accepted so far */
byte gate_highest;       /* FenceGate's highest_ for the one key */
byte tp_left = TPDEL;
byte drops_left = DROPS;

/* Requests travel in order on a client's connection; replies and watch events come back in order. */
#define R_CREATE 1
#define R_GETCH 2
#define R_DATA_OWN 3   /* get_data with watch on our own node (watch_own_node_locked) */
#define R_DATA_BLK 4   /* get_data with watch on the blocker (watch_locked) */
#define R_EXISTS 5
#define R_DELETE 6
#define R_DELETE_FF 7  /* fire-and-forget delete of a create we no longer track (on_created) */
#define R_RECOVER 8    /* sync + getChildren (recover_locked) */
#define R_DATA_2 9     /* get_data with watch on the node our blocker waits for (watch_second_blocker_locked) */
#define EV_DELETED 20
#define EV_CHILD 21    /* the lock path's children changed (the listing's children watch) */

#define OK 0
#define NONODE 1
#define CLOSS 2        /* connection loss */
#define SESSEXP 3      /* session expired / invalid state */
#define NOSPACE 4      /* the model ran out of node slots: treated like a refused create */

chan req[NC] = [QLEN] of { byte, byte, byte, byte };       /* op, attempt, arg, session */
chan rep[NC] = [QLEN] of { byte, byte, byte, byte, byte }; /* op, rc, attempt, arg, arg2 */

#define USABLE(c, g) (g != 0 && g == sid[c] && connected[c])
#define DEADLINE(c) (proof[c] + T - MARGIN - LAG)

/* SessionCore::issue: a request on a connection that is down fails at once with connection loss,
 * on a generation that is no longer current with invalid state. */
inline send(c, op, att, arg, g) {
  if
  :: g == 0 || g != sid[c] -> rep[c]!op, SESSEXP, att, arg, 0
  :: else ->
     if
     :: connected[c] -> req[c]!op, att, arg, g
     :: else -> rep[c]!op, CLOSS, att, arg, 0
     fi
  fi
}

/* A child is created under the lock path: the children watches fire, once each. */
inline server_children_changed() {
  k = 0;
  do
  :: k < NC ->
     if
     :: cw[k] -> cw[k] = false; assert(len(rep[k]) < QLEN); rep[k]!EV_CHILD, OK, 0, 0, 0
     :: else -> skip
     fi;
     k++
  :: else -> break
  od
}

/* The server deletes a node and fires the data watches on it, once each, then the children
 * watches on the lock path. */
inline server_delete(i) {
  live = live & ~(1 << i);
  k = 0;
  do
  :: k < NC ->
     if
     :: dw[k] & (1 << i) ->
        dw[k] = dw[k] & ~(1 << i);
        assert(len(rep[k]) < QLEN);  /* the model's queues are long enough */
        rep[k]!EV_DELETED, OK, 0, i, 0
     :: else -> skip
     fi;
     /* the parent's children watches fire after the node's data watches */
     if
     :: cw[k] -> cw[k] = false; assert(len(rep[k]) < QLEN); rep[k]!EV_CHILD, OK, 0, 0, 0
     :: else -> skip
     fi;
     k++
  :: else -> break
  od
}

/* The server ends a session: expiry, or the close of a handle the client let go of. */
inline server_end_session(s) {
  sess_alive[s] = false;
  j = 0;
  do
  :: j < MAXN ->
     if
     :: (live & (1 << j)) && owner[j] == s -> server_delete(j)
     :: else -> skip
     fi;
     j++
  :: else -> break
  od
}

/* The server runs one request of client x's connection: requests of a connection run in order. */
inline serve(x) {
  req[x]?op, att, arg, g;
  if
  :: !sess_alive[g] -> rep[x]!op, SESSEXP, att, arg, 0
  :: else ->
     lastheard[g] = now;  /* any request is heard from the session */
     if
     :: op == R_CREATE ->
        if
        :: nextslot < MAXN ->
           i = nextslot; nextslot++;
           live = live | (1 << i); owner[i] = g; guid[i] = arg;
           if :: arg & WRITER_MARK -> writers = writers | (1 << i) :: else -> skip fi;
           server_children_changed();  /* the events go out before the create's reply */
           rep[x]!op, OK, att, i, 0
        :: else -> rep[x]!op, NOSPACE, att, arg, 0
        fi
     :: op == R_GETCH -> cw[x] = true; rep[x]!op, OK, att, live, 0  /* with a children watch */
     :: op == R_RECOVER -> rep[x]!op, OK, att, live, 0
     :: op == R_DATA_OWN || op == R_DATA_BLK || op == R_DATA_2 ->
        if
        :: live & (1 << arg) -> dw[x] = dw[x] | (1 << arg); rep[x]!op, OK, att, arg, 0
        :: else -> rep[x]!op, NONODE, att, arg, 0
        fi
     :: op == R_EXISTS ->
        if
        :: live & (1 << arg) -> rep[x]!op, OK, att, arg, owner[arg]
        :: else -> rep[x]!op, NONODE, att, arg, 0
        fi
     :: op == R_DELETE || op == R_DELETE_FF ->
        if
        :: live & (1 << arg) -> server_delete(arg); rep[x]!op, OK, att, arg, 0
        :: else -> rep[x]!op, NONODE, att, arg, 0
        fi
     fi
  fi
}

/* Session s ends at the server: expired (not heard from for T), or its handle's close arrived. */
#define SESSION_ENDS(s) \
  :: atomic { sess_alive[s] && (now >= lastheard[s] + T || closing[s]) -> server_end_session(s); j = 0; k = 0 }

/* Fault: a third party (an operator, a peer breaking the lock) deletes node x. */
#define THIRD_PARTY_DELETES(x) \
  :: atomic { tp_left > 0 && (live & (1 << x)) -> \
       tp_left--; \
       if \
       /* as the server sees it, x holds: nothing before it blocks it (decide()) */ \
       :: (live & ((1 << x) - 1) & ((writers & (1 << x)) -> 255 : writers)) == 0 -> \
          tp_deleted_head = tp_deleted_head | (1 << x) \
       :: else -> skip \
       fi; \
       server_delete(x); k = 0 }

active proctype Server() {
  byte op, att, arg, g, i, j, k;
  end_server:
  do
  :: atomic { nempty(req[0]) -> serve(0); op = 0; att = 0; arg = 0; g = 0; i = 0; k = 0 }
  :: atomic { nempty(req[1]) -> serve(1); op = 0; att = 0; arg = 0; g = 0; i = 0; k = 0 }
#if NC > 2
  :: atomic { nempty(req[2]) -> serve(2); op = 0; att = 0; arg = 0; g = 0; i = 0; k = 0 }
#endif
  SESSION_ENDS(1)
  SESSION_ENDS(2)
#if MAXS > 3
  SESSION_ENDS(3)
#endif
#if MAXS > 4
  SESSION_ENDS(4)
#endif
#if MAXS > 5
  SESSION_ENDS(5)
#endif
#if TPDEL > 0
  THIRD_PARTY_DELETES(0)
  THIRD_PARTY_DELETES(1)
  THIRD_PARTY_DELETES(2)
  THIRD_PARTY_DELETES(3)
  THIRD_PARTY_DELETES(4)
  THIRD_PARTY_DELETES(5)
#endif
  od
}

#if MAXT > 0
/* Time passes. On each tick each client's heartbeat (send_heartbeat: a sync through the leader)
 * is heard by the server and answered (note_leader_proof: the proof is the time it was sent), or
 * heard with its reply lost, or not sent at all (the client is frozen or cut off). Any process may
 * also be frozen for any number of ticks: nothing forces it to run. */
active proctype Clock() {
  byte x;
  end_clock:
  do
  :: atomic {
       now < MAXT -> now++;
       x = 0;
       do
       :: x < NC ->
          if
          :: connected[x] && sess_alive[sid[x]] ->
             if
             :: lastheard[sid[x]] = now; proof[x] = now
             :: lastheard[sid[x]] = now
             :: skip
             fi
          :: else -> skip
          fi;
          x++
       :: else -> break
       od;
       x = 0
     }
  od
}
#endif

/* The functions of Contender and SessionCore a step runs: each step sets `call` to the first, and
 * the trampoline below runs them (a function that calls another sets `call` again), all in one
 * atomic step as the code runs them under the session mutex. */
#define F_NONE 0
#define F_BEGIN 1
#define F_CHECK 2
#define F_RECOVER 3
#define F_EVALUATE 4
#define F_WATCH 5
#define F_GRANT 6
#define F_OWN_GONE 7
#define F_REMOVE 8
#define F_WATCH_OWN 9
#define F_TROUBLE 10
#define F_RECONNECTED 11
#define F_DECLARE_LOST 12
#define F_FINISH 13

#define RETRY_NONE 0
#define RETRY_RECOVER 1
#define RETRY_CHECK 2
#define RETRY_REMOVE 3
#define RETRY_WATCH_OWN 4
#define OW_NONE 0
#define OW_PENDING 1
#define OW_SET 2

/* Whether our node is vouched for (Contender::own_node_vouched_for_locked): the children watch of
 * the listing that decided is live, or our own-node watch is set. OLD_SHORTCUT trusts it blindly. */
#ifdef OLD_SHORTCUT
#define VOUCHED true
#else
#define VOUCHED (path_live || own_watch == OW_SET)
#endif

/* grant_locked's grant (Client's locals). A grant is handed out only before the deadline: a
 * holder granted past it would believe it holds where property 2 no longer counts it. */
inline hold_lock() {
  assert(now < DEADLINE(c));
  phase[c] = HELD; completed = true; grants[c]++; wrote = false;
  own_timer = !path_live  /* schedule_own_node_watch_locked, unless the children watch stands in */
}

/* One client: its session (SessionCore) and one contender at a time (Contender), and the job
 * that holds the lock and writes to the fenced resource. */
proctype Client(byte c) {
  byte op, rc, att, arg, arg2;
  byte call, attempt, gen, myguid, blk, blk_serves, blk2, nb, retry, own_watch, i, j, k, n, lost_sid, listing;
  bool abandon, completed, gbd, blk_reg, holding_lost, own_timer, wrote, server_expired, path_live;
  byte round = 1;
  byte cancels_left = CANCELS;

  /* SessionCore::connect_or_throw: the first session; then Contender::start */
  atomic {
#ifdef RWLOCK
    if :: writer[c] = true :: writer[c] = false fi;  /* a ReadWriteLock's reader or writer */
#else
    writer[c] = true;  /* the exclusive lock: every node blocks the next */
#endif
    sid[c] = c + 1; sess_alive[sid[c]] = true; sess_client[sid[c]] = c;
    lastheard[sid[c]] = now; proof[c] = now; connected[c] = true;
    call = F_BEGIN
  }

  do
  :: atomic {
     if
     :: call != F_NONE -> skip  /* Contender::start: begin_locked */
     /* ---- a reply or a watch event, in the order the connection delivers them ---- */
     :: rep[c]?op, rc, att, arg, arg2 ->
        if
        :: op == EV_CHILD ->  /* Contender::on_path_changed_locked */
           if
           :: path_live ->
              path_live = false;
              if
              :: phase[c] == HELD && own_watch == OW_NONE && !own_timer -> own_timer = true
              :: phase[c] == WATCHING && gbd -> call = F_WATCH_OWN
              :: else -> skip
              fi
           :: else -> skip
           fi
        :: op == EV_DELETED ->
           if
           :: arg == mynode[c] && own_watch == OW_SET ->
              /* the watcher set by watch_own_node_locked */
              own_watch = OW_NONE; call = F_OWN_GONE
           :: arg == blk && blk_reg ->
              /* the watcher set by watch_locked: it serves the attempt that set it, or a later one
               * that found the same blocker while it was set (evaluate_locked) */
              blk_reg = false;
              if
              :: phase[c] == WATCHING && attempt == blk_serves ->
                 if
                 :: gbd && VOUCHED -> call = F_GRANT
#ifdef NO_RECHECK
                 :: !gbd -> skip
                 :: gbd && !VOUCHED -> call = F_CHECK
#else
                 :: else -> call = F_CHECK
#endif
                 fi
              :: else -> skip  /* a listing under way sees what fired it */
              fi
           :: arg == blk2 && phase[c] == WATCHING && attempt == blk_serves ->  /* the second watch */
#ifdef NO_RECHECK
              skip
#else
              call = F_CHECK
#endif
           :: else -> skip  /* a watcher of an older attempt: ignored */
           fi
        :: op == R_CREATE ->  /* Contender::on_created */
           if
           :: att != attempt || phase[c] != CREATING ->
              /* a create we no longer track that took effect on the current session: delete it */
              if
              :: rc == OK && USABLE(c, gen) && arg != mynode[c] -> send(c, R_DELETE_FF, 0, arg, gen)
              :: else -> skip
              fi
           :: else ->
              if
              :: abandon && rc != OK && rc != CLOSS -> call = F_FINISH
              :: else ->
                 if
                 :: rc == OK ->
                    mynode[c] = arg; tok[c] = arg + 1;  /* token_ = the czxid of our create */
                    if :: abandon -> call = F_REMOVE :: else -> skip fi  /* the pipelined listing decides */
                 :: rc == NOSPACE -> completed = true; call = F_FINISH  /* like a refused create */
                 :: else -> j = RETRY_RECOVER; call = F_TROUBLE
                 fi
              fi
           fi
        :: op == R_GETCH ->  /* Contender::on_children */
           if
           :: att != attempt || (phase[c] != CREATING && phase[c] != CHECKING) || mynode[c] == NONE -> skip
           :: else ->
              phase[c] = CHECKING;
              if
              :: rc == OK -> listing = arg; path_live = true; call = F_EVALUATE
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
                 if :: (arg & (1 << i)) && guid[i] == MYGUID(c) -> k = i :: else -> skip fi; i++
              :: else -> break
              od;
              if
              :: k == NONE -> call = F_BEGIN  /* the create never happened */
              :: else -> send(c, R_EXISTS, attempt, k, gen)
              fi
           fi
        :: op == R_EXISTS ->  /* recover_locked: adopt only a node whose ephemeralOwner is this session */
           if
           :: att != attempt || phase[c] != RECOVERING -> skip
           :: else ->
              if
              :: rc == OK && arg2 == sid[c] && sid[c] != 0 ->
                 mynode[c] = arg; tok[c] = arg + 1;
                 if
                 :: abandon -> call = F_REMOVE
                 :: else -> call = F_CHECK
                 fi
              :: (rc == OK && !(arg2 == sid[c] && sid[c] != 0)) || rc == NONODE -> call = F_BEGIN
              :: else -> j = RETRY_RECOVER; call = F_TROUBLE
              fi
           fi
        :: op == R_DATA_OWN ->  /* watch_own_node_locked's reply (still_this_node) */
           if
           :: arg != mynode[c] -> skip
           :: arg == mynode[c] && rc == OK -> own_watch = OW_SET
           :: arg == mynode[c] && rc != OK ->
              own_watch = OW_NONE;
              if
              :: rc == NONODE -> call = F_OWN_GONE
              :: rc != NONODE && phase[c] == HELD -> j = RETRY_WATCH_OWN; call = F_TROUBLE
              :: else -> skip
              fi
           fi
        :: op == R_DATA_2 ->  /* watch_second_blocker_locked's reply: gone already, look again */
           if
           :: att == attempt && phase[c] == WATCHING && rc == NONODE -> call = F_CHECK
           :: else -> skip  /* set (or failed: the blocker's watch reports the trouble) */
           fi
        :: op == R_DATA_BLK ->  /* watch_locked's reply */
           if
           :: att != attempt || phase[c] != WATCHING -> skip
           :: else ->
              if
              :: rc == OK -> blk_reg = true  /* watch set; wait for it */
              :: rc == NONODE ->  /* gone already: ours, or look again */
                 if
                 :: gbd && VOUCHED -> call = F_GRANT
                 :: else -> call = F_CHECK
                 fi
              :: else -> j = RETRY_CHECK; call = F_TROUBLE
              fi
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

     /* ---- the holder's job: writes to the fenced resource, then releases ---- */
     :: (phase[c] == HELD || phase[c] == LOST) && !wrote ->
        /* FenceGate::admit: refuses a token lower than the highest admitted. The job may write
         * after its loss, before it has heard of it. */
        wrote = true;
#ifdef GATE_ADMITS_LOWER
        if :: true ->
#else
        if :: tok[c] >= gate_highest ->
#endif
             assert(tok[c] >= max_admitted);  /* never a lower token after a higher one */
             max_admitted = tok[c]; gate_highest = tok[c]
        :: else -> skip  /* refused */
        fi
     :: phase[c] == HELD && wrote -> call = F_REMOVE  /* Contender::release of a held lock */
     :: phase[c] == LOST && wrote -> call = F_FINISH  /* Contender::release of a lost lock */

     /* schedule_own_node_watch_locked's timer */
     :: phase[c] == HELD && own_timer && gen == sid[c] -> own_timer = false; call = F_WATCH_OWN

     /* a user cancels a waiting contender (Contender::cancel) */
     :: cancels_left > 0 && !completed &&
        (phase[c] == WAITSESS || phase[c] == CREATING || phase[c] == RECOVERING ||
         phase[c] == CHECKING || phase[c] == WATCHING) ->
        cancels_left--; completed = true; abandon = true;
        if
        :: phase[c] == WAITSESS -> call = F_FINISH
        :: phase[c] == CHECKING || phase[c] == WATCHING -> call = F_REMOVE
        :: phase[c] == CREATING && mynode[c] != NONE -> call = F_REMOVE
        :: else -> skip  /* creating: on_created deletes it; recovering: deleted once found */
        fi

     /* ---- the session monitor ---- */
     /* on_deadline_timer: past the deadline, deadline_verdict_locked declares the session lost, at
      * once when the monitor saw it pass, or once the recheck of a deadline it slept through ends
      * without a proof (recheck_until_locked): a step that may come at any point past it */
     :: sid[c] != 0 && now >= DEADLINE(c) -> server_expired = false; call = F_DECLARE_LOST
     /* the recheck ends with a proof (note_leader_proof: the Clock answered a heartbeat, the
      * deadline is ahead again; end_recheck_alive_locked): Contender::on_deadline_renewed, which
      * runs check_locked again if the contender is still checking or watching with Retry::check */
     :: doubt[c] && retry == RETRY_CHECK && USABLE(c, gen) && now < DEADLINE(c) &&
        (phase[c] == CHECKING || phase[c] == WATCHING) ->
        doubt[c] = false; retry = RETRY_NONE; call = F_CHECK

     /* fault: the connection drops; unanswered requests fail with connection loss */
     :: drops_left > 0 && connected[c] ->
        drops_left--; connected[c] = false;
        /* replies not yet read fail (the watch such a reply carried is not registered); requests
         * not yet run never run; watch events come again after the reconnect (set-watches) */
        n = len(rep[c]); i = 0;
        do
        :: i < n ->
           rep[c]?op, rc, att, arg, arg2;
           if
           :: op == EV_DELETED || op == EV_CHILD -> rep[c]!op, rc, att, arg, arg2
           :: else ->
              if
              :: (op == R_DATA_OWN || op == R_DATA_BLK || op == R_DATA_2) && rc == OK -> dw[c] = dw[c] & ~(1 << arg)
              /* a children watch the client never saw registered; one it saw is set again */
              :: op == R_GETCH && rc == OK && !path_live -> cw[c] = false
              :: else -> skip
              fi;
              rep[c]!op, CLOSS, att, arg, 0
           fi;
           i++
        :: else -> break
        od;
        do
        :: req[c]?op, att, arg, k -> rep[c]!op, CLOSS, att, arg, 0
        :: empty(req[c]) -> break
        od
     /* the connection comes back on the same session (on_connection_event: connected, resumed),
      * or the server says it expired (on_connection_event: expired) */
     :: sid[c] != 0 && !connected[c] ->
        if
        :: sess_alive[sid[c]] -> connected[c] = true; call = F_RECONNECTED
        :: else -> server_expired = true; call = F_DECLARE_LOST
        fi
     /* a new session (open_connection_locked, then connected): Contender::on_new_session */
     :: sid[c] == 0 && nextsid < MAXS ->
        sid[c] = nextsid; nextsid++; sess_alive[sid[c]] = true; sess_client[sid[c]] = c;
        lastheard[sid[c]] = now; proof[c] = now; connected[c] = true;
        if
        :: phase[c] == WAITSESS -> call = F_BEGIN
        :: else -> skip
        fi

     /* ---- this acquisition is over: the next (a new Contender), or the end ---- */
     :: phase[c] == FINISHED && round < ROUNDS && empty(req[c]) && empty(rep[c]) ->
        round++;
#ifdef RWLOCK
        if :: writer[c] = true :: writer[c] = false fi;
#endif
        abandon = false; completed = false; holding_lost = false; own_timer = false; path_live = false;
        retry = RETRY_NONE; doubt[c] = false; own_watch = OW_NONE; mynode[c] = NONE;
        call = F_BEGIN
     :: phase[c] == FINISHED && round == ROUNDS && empty(req[c]) && empty(rep[c]) ->
        done++; goto end_client
     fi;

     do
     :: call == F_NONE -> break

     :: call == F_BEGIN ->  /* Contender::begin_locked */
        call = F_NONE;
        if
        :: abandon -> call = F_FINISH
        :: else ->
           gen = sid[c];
           if
           :: !USABLE(c, gen) -> phase[c] = WAITSESS
           :: else ->
              phase[c] = CREATING; retry = RETRY_NONE; doubt[c] = false; mynode[c] = NONE; own_watch = OW_NONE; blk_reg = false;
              path_live = false;
              myguid++;  /* new_guid(): a fresh GUID per attempt */
              attempt++;
              send(c, R_CREATE, attempt, MYGUID(c), gen);
              /* the pipelined listing: run after the create, so it already contains our node */
              send(c, R_GETCH, attempt, 0, gen)
           fi
        fi

     :: call == F_CHECK ->  /* Contender::check_locked */
        call = F_NONE;
        phase[c] = CHECKING; attempt++;
        send(c, R_GETCH, attempt, 0, gen)

     :: call == F_RECOVER ->  /* Contender::recover_locked: sync, then list to find our GUID */
        call = F_NONE;
        phase[c] = RECOVERING; attempt++;
        send(c, R_RECOVER, attempt, 0, gen)

     :: call == F_EVALUATE ->  /* Contender::evaluate_locked(listing) */
        call = F_NONE;
        if
        :: abandon -> call = F_REMOVE
        :: !abandon && !(listing & (1 << mynode[c])) -> call = F_OWN_GONE
        :: else ->
           /* decide(): index 0 holds; a waiter watches its immediate predecessor */
           /* and a reader (RWLOCK) waits for the nearest earlier writer only */
           n = 0; nb = NONE; i = 0;
           do
           :: i < mynode[c] ->
              if
              :: (listing & (1 << i)) && (writer[c] || (writers & (1 << i))) -> n++; nb = i
              :: else -> skip
              fi;
              i++
           :: else -> break
           od;
           /* a writer's second blocker: what its blocker waits for, by the blocker's role */
           blk2 = NONE;
           if
           :: n > 0 && writer[c] ->
              i = 0;
              do
              :: i < nb ->
                 if
                 :: (listing & (1 << i)) && ((writers & (1 << nb)) || (writers & (1 << i))) -> blk2 = i
                 :: else -> skip
                 fi;
                 i++
              :: else -> break
              od
           :: else -> skip
           fi;
           if
           :: n == 0 -> call = F_GRANT
           :: else ->
              gbd = (n == 1);  /* granted_by_its_deletion: the blocker is the last obstacle */
              if
              :: blk_reg && nb == blk ->
                 /* the blocker we watch, its watch set and not fired: it serves this attempt */
                 blk_serves = attempt; phase[c] = WATCHING;
#ifndef OLD_SHORTCUT
                 if
                 :: gbd && !VOUCHED && own_watch == OW_NONE && mynode[c] != NONE ->
                    own_watch = OW_PENDING; send(c, R_DATA_OWN, 0, mynode[c], gen)
                 :: else -> skip
                 fi;
#endif
                 if
                 :: blk2 != NONE -> send(c, R_DATA_2, attempt, blk2, gen)
                 :: else -> skip
                 fi
              :: else -> blk = nb; call = F_WATCH
              fi
           fi
        fi

     :: call == F_WATCH ->  /* Contender::watch_locked(blocker, granted_by_its_deletion) */
        call = F_NONE;
        phase[c] = WATCHING;
#ifndef OLD_SHORTCUT
        /* watch_own_node_locked, where nothing vouches for our node and its blocker's deletion
         * would grant us; sent before the blocker's watch */
        if
        :: gbd && !VOUCHED && own_watch == OW_NONE && mynode[c] != NONE ->
           own_watch = OW_PENDING; send(c, R_DATA_OWN, 0, mynode[c], gen)
        :: else -> skip
        fi;
#endif
        attempt++; blk_serves = attempt; blk_reg = false;
        send(c, R_DATA_BLK, attempt, blk, gen);
        if
        :: blk2 != NONE -> send(c, R_DATA_2, attempt, blk2, gen)
        :: else -> skip
        fi

     :: call == F_GRANT ->  /* Contender::grant_locked */
        call = F_NONE;
        /* SessionCore::deadline_verdict_locked */
        if
        :: gen != sid[c] -> skip
        /* lost: the deadline passed while the monitor was looking: declared lost at once */
        :: gen == sid[c] && now >= DEADLINE(c) -> server_expired = false; call = F_DECLARE_LOST
        /* in_doubt: the monitor slept through the deadline (its previous look was kMonitorAsleepAfter
         * or more before) and asks the ensemble: no grant; the contender waits for the verdict
         * (retry_ = Retry::check) in its phase (checking or watching), its watches' events handled
         * as in that phase, until the monitor's steps decide (on_deadline_renewed, or the loss) or
         * a reconnect runs check_locked */
        :: gen == sid[c] && now >= DEADLINE(c) ->
#ifdef GRANT_IN_DOUBT
           hold_lock()
#else
           doubt[c] = true; retry = RETRY_CHECK
#endif
        /* alive */
        :: else -> hold_lock()
        fi

     :: call == F_OWN_GONE ->  /* Contender::own_node_gone_locked: the one rule */
        call = F_NONE;
        if
        :: phase[c] == HELD -> phase[c] = LOST  /* lose_locked(node_deleted) */
        :: phase[c] == CREATING || phase[c] == CHECKING || phase[c] == WATCHING -> call = F_BEGIN
        :: else -> skip  /* recovering finds out by itself; releasing, lost, finished need nothing */
        fi

     :: call == F_REMOVE ->  /* Contender::remove_node_locked: retried through connection loss */
        call = F_NONE;
        abandon = true;
        if
        :: mynode[c] == NONE || gen != sid[c] -> call = F_FINISH
        :: else ->
           phase[c] = RELEASING; retry = RETRY_NONE; doubt[c] = false;
           if
           :: !USABLE(c, gen) -> retry = RETRY_REMOVE
           :: else -> attempt++; send(c, R_DELETE, attempt, mynode[c], gen)
           fi
        fi

     :: call == F_WATCH_OWN ->  /* Contender::watch_own_node_locked */
        call = F_NONE;
        if
        :: own_watch == OW_NONE && mynode[c] != NONE ->
           own_watch = OW_PENDING; send(c, R_DATA_OWN, 0, mynode[c], gen)
        :: else -> skip
        fi

     :: call == F_TROUBLE ->  /* Contender::handle_session_trouble_locked(rc, retry j) */
        call = F_NONE;
        if
#ifdef RELEASE_NOT_RETRIED
        :: rc == CLOSS && j == RETRY_REMOVE -> call = F_FINISH
        :: rc == CLOSS && j != RETRY_REMOVE ->
#else
        :: rc == CLOSS ->  /* retry_after_reconnect_locked */
#endif
           retry = j; doubt[c] = false;
           if :: USABLE(c, gen) -> call = F_RECONNECTED :: else -> skip fi
        :: rc != CLOSS && gen != sid[c] && phase[c] != FINISHED && phase[c] != HELD && phase[c] != LOST ->
           if
           :: abandon || phase[c] == RELEASING -> call = F_FINISH
           :: else -> call = F_BEGIN
           fi
        :: else -> skip  /* on_session_lost takes it from here */
        fi

     :: call == F_RECONNECTED ->  /* Contender::on_reconnected (only while attached) */
        call = F_NONE;
        if
        :: phase[c] == LOST || phase[c] == FINISHED -> skip
        :: else ->
           j = retry; retry = RETRY_NONE; doubt[c] = false;
           if
           :: j == RETRY_RECOVER -> call = F_RECOVER
           :: j == RETRY_CHECK -> call = F_CHECK
           :: j == RETRY_REMOVE -> call = F_REMOVE
           :: j == RETRY_WATCH_OWN && phase[c] == HELD -> call = F_WATCH_OWN
           :: else -> skip
           fi;
           if
           :: call == F_NONE && phase[c] == WAITSESS -> call = F_BEGIN
           /* a waiter lists again rather than trust the order of the re-set watches' events */
           :: call == F_NONE && phase[c] == WATCHING -> call = F_CHECK
           :: else -> skip
           fi
        fi

     :: call == F_DECLARE_LOST ->  /* SessionCore::declare_lost_locked(reason, server_expired) */
        call = F_NONE;
        lost_sid = sid[c];
        sid[c] = 0; connected[c] = false;  /* then open_connection_locked */
        dw[c] = 0; cw[c] = false; path_live = false;  /* the old handle's watchers ignore their events */
        /* Contender::on_session_lost(lost generation) */
        if
        :: gen != lost_sid -> skip
        :: else ->
           if
           :: phase[c] == HELD ->  /* lose_locked(session_lost): hold_lost_session_locked */
              phase[c] = LOST; holders_stopping[lost_sid]++; holding_lost = true
           :: phase[c] == RELEASING -> call = F_FINISH  /* the node goes with the session */
           :: phase[c] == LOST || phase[c] == FINISHED -> skip
           :: else ->  /* a waiter never held anything (also one whose grant waits for the
                        * verdict): queue again on the next session */
              attempt++; mynode[c] = NONE; retry = RETRY_NONE; doubt[c] = false;
              if
              :: abandon -> call = F_FINISH
              :: else -> phase[c] = WAITSESS
              fi
           fi
        fi;
        /* the lost handle is closed now unless a holder is still stopping (close_retired_locked) */
        if
        :: server_expired || holders_stopping[lost_sid] == 0 -> closing[lost_sid] = true
        :: else -> skip
        fi

     :: call == F_FINISH ->  /* Contender::finish_locked */
        call = F_NONE;
        phase[c] = FINISHED; retry = RETRY_NONE; doubt[c] = false;
        if
        :: holding_lost ->  /* SessionCore::let_go_locked: the last holder closes the handle */
           holding_lost = false;
           holders_stopping[gen]--;
           if :: holders_stopping[gen] == 0 -> closing[gen] = true :: else -> skip fi
        :: else -> skip
        fi
     od;
     /* scratch values carry nothing to the next step */
     op = 0; rc = 0; att = 0; arg = 0; arg2 = 0; i = 0; j = 0; k = 0; n = 0; nb = 0; listing = 0; lost_sid = 0;
     server_expired = false
     }
  od;
end_client:
  skip
}

/* At most one client believes it holds within its deadline (a holder whose node a third party
 * deleted is told only when its own-node watch fires: that window is excluded unless
 * STRICT_OVERLAP, see docs/MODEL.md). */
#ifdef STRICT_OVERLAP
#define VALID(c) (phase[c] == HELD && now < DEADLINE(c))
#else
#define VALID(c) (phase[c] == HELD && now < DEADLINE(c) && !(tp_deleted_head & (1 << mynode[c])))
#endif
/* Two holders conflict unless both are readers. */
#define CONFLICT(a, b) (VALID(a) && VALID(b) && (writer[a] || writer[b]))
#if NC == 2
#define QUIET (empty(req[0]) && empty(req[1]))
#define ONE_HOLDER (!CONFLICT(0, 1))
#define ALL_GRANTED (grants[0] > 0 && grants[1] > 0)
#else
#define QUIET (empty(req[0]) && empty(req[1]) && empty(req[2]))
#define ONE_HOLDER (!CONFLICT(0, 1) && !CONFLICT(0, 2) && !CONFLICT(1, 2))
#define ALL_GRANTED (grants[0] > 0 && grants[1] > 0 && grants[2] > 0)
#endif

active proctype Properties() {
  atomic { !ONE_HOLDER -> assert(ONE_HOLDER) }
}

/* A released or cancelled contender leaves no node: once every client has finished and nothing
 * is in flight, a node that is left belongs to a session that was let go (closed or expiring). */
active proctype NoNodeLeft() {
  byte i, s;
  atomic {
    done == NC && QUIET ->
    i = 0;
    do
    :: i < MAXN ->
       s = owner[i];
       assert(!(live & (1 << i)) || !sess_alive[s] || closing[s] || sid[sess_client[s]] != s);
       i++
    :: else -> break
    od
  }
}

init {
  byte c;
  atomic {
    c = 0;
    do
    :: c < NC -> mynode[c] = NONE; run Client(c); c++
    :: else -> break
    od
  }
}

#ifdef LIVENESS
ltl every_waiter_granted { <> ALL_GRANTED }
#endif
