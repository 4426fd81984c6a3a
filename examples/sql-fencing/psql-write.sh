#!/bin/sh
# A fenced write to PostgreSQL from a shell job under zklock (docs/fencing.md):
#
#   zklock /locks/ledger examples/sql-fencing/psql-write.sh "$DATABASE_URL" ledger "some value"
#
# In one transaction: admit $ZKLOCK_FENCING_TOKEN for NAME (the schema's trigger refuses a token
# lower than one admitted before), then append VALUE to entries. Exit status: 0 written; 3 refused
# (psql's status for a failed statement; stderr names the stale token) or another SQL error, and
# then nothing was written; 1-2 psql could not connect or run; 64 usage.
set -eu
if [ $# -ne 3 ]; then
  echo "usage: psql-write.sh DATABASE_URL NAME VALUE (under zklock)" >&2
  exit 64
fi
case ${ZKLOCK_FENCING_TOKEN:-} in
  '' | *[!0-9]*) echo "psql-write.sh: ZKLOCK_FENCING_TOKEN is not a token: run me under zklock" >&2; exit 64 ;;
esac
# :'name' is psql's quoted literal: values go in as data, never as SQL.
exec psql "$1" -X -q -v ON_ERROR_STOP=1 -v name="$2" -v token="$ZKLOCK_FENCING_TOKEN" -v value="$3" <<'SQL'
BEGIN;
INSERT INTO fence (name, token) VALUES (:'name', :'token')
  ON CONFLICT (name) DO UPDATE SET token = excluded.token;
INSERT INTO entries (name, token, value) VALUES (:'name', :'token', :'value');
COMMIT;
SQL
