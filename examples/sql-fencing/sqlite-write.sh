#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# A fenced write to an SQLite file from a shell job under zklock (docs/fencing.md):
#
#   zklock /locks/ledger examples/sql-fencing/sqlite-write.sh /var/lib/ledger.db ledger "some value"
#
# In one transaction: append VALUE to entries with $ZKLOCK_FENCING_TOKEN (the schema's trigger
# refuses the row if a later holder's token was admitted), then admit the token for NAME, last (a
# stale token rolls the whole transaction back there).
# Exit status: 0 written; 1 refused (stderr: "stale fencing token") or another error, and then
# nothing was written; 64 usage.
#
# A writer frozen inside its transaction keeps the file's write lock for its whole freeze: this
# write waits for it at most FENCE_BUSY_TIMEOUT_MS milliseconds (default 10000, about twice the
# silence tolerance of zklock's default 10 s session), then fails with nothing written.
set -eu
if [ $# -ne 3 ]; then
  echo "usage: sqlite-write.sh DATABASE_FILE NAME VALUE (under zklock)" >&2
  exit 64
fi
case ${ZKLOCK_FENCING_TOKEN:-} in
  '' | *[!0-9]*) echo "sqlite-write.sh: ZKLOCK_FENCING_TOKEN is not a token: run me under zklock" >&2; exit 64 ;;
esac
busy_timeout=${FENCE_BUSY_TIMEOUT_MS:-10000}
case $busy_timeout in
  '' | *[!0-9]*) echo "sqlite-write.sh: FENCE_BUSY_TIMEOUT_MS is not a number of milliseconds" >&2; exit 64 ;;
esac
# An SQL string literal: quotes doubled, so values go in as data, never as SQL.
quote() { printf "'%s'" "$(printf '%s' "$1" | sed "s/'/''/g")"; }
name=$(quote "$2")
value=$(quote "$3")
# -bail: stop at the first error; sqlite3 then exits, and its open transaction is rolled back.
# BEGIN IMMEDIATE takes the write lock first; .timeout waits for another writer's lock.
exec sqlite3 -bail "$1" <<SQL
.timeout $busy_timeout
BEGIN IMMEDIATE;
INSERT INTO entries (name, token, value) VALUES ($name, $ZKLOCK_FENCING_TOKEN, $value);
INSERT INTO fence (name, token) VALUES ($name, $ZKLOCK_FENCING_TOKEN)
  ON CONFLICT (name) DO UPDATE SET token = excluded.token;
COMMIT;
SQL
