#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# A fenced write to PostgreSQL from a shell job under zklock (docs/fencing.md):
#
#   zklock /locks/ledger examples/sql-fencing/psql-write.sh "$DATABASE_URL" ledger "some value"
#
# In one transaction: admit $ZKLOCK_FENCING_TOKEN for NAME (the schema's trigger refuses a token
# lower than one admitted before), then append VALUE to entries. Exit status: 0 written; 3 refused
# (psql's status for a failed statement; stderr names the stale token) or another SQL error, and
# then nothing was written; 1-2 psql could not connect or run; 64 usage.
#
# Bounds on a writer frozen inside its transaction (docs/fencing.md): the server ends this
# session's transaction once it sits idle FENCE_IDLE_TIMEOUT (default 5s: no longer than the lock's
# silence tolerance, 5.5 s for zklock's default 10 s session), and this write waits at most
# FENCE_LOCK_TIMEOUT (default 10s) for another writer's lock on the fence row.
set -eu
if [ $# -ne 3 ]; then
  echo "usage: psql-write.sh DATABASE_URL NAME VALUE (under zklock)" >&2
  exit 64
fi
case ${ZKLOCK_FENCING_TOKEN:-} in
  '' | *[!0-9]*) echo "psql-write.sh: ZKLOCK_FENCING_TOKEN is not a token: run me under zklock" >&2; exit 64 ;;
esac
# :'name' is psql's quoted literal: values go in as data, never as SQL.
exec psql "$1" -X -q -v ON_ERROR_STOP=1 -v name="$2" -v token="$ZKLOCK_FENCING_TOKEN" -v value="$3" \
  -v idle_timeout="${FENCE_IDLE_TIMEOUT:-5s}" -v lock_timeout="${FENCE_LOCK_TIMEOUT:-10s}" <<'SQL'
SET idle_in_transaction_session_timeout = :'idle_timeout';
SET lock_timeout = :'lock_timeout';
BEGIN;
INSERT INTO fence (name, token) VALUES (:'name', :'token')
  ON CONFLICT (name) DO UPDATE SET token = excluded.token;
INSERT INTO entries (name, token, value) VALUES (:'name', :'token', :'value');
COMMIT;
SQL
