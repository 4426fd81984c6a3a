-- SPDX-License-Identifier: Apache-2.0
-- Fencing in PostgreSQL (docs/fencing.md): each protected name keeps the highest fencing token it
-- has admitted, in the same database as the data it guards, so that the token check and the data
-- write commit or roll back together.
--
--   psql "$DATABASE_URL" -X -q -v ON_ERROR_STOP=1 -f examples/sql-fencing/postgres-schema.sql

SET client_min_messages = warning;  -- quiet "already exists" on a second run

CREATE TABLE IF NOT EXISTS fence (
  name  text   PRIMARY KEY,              -- what one lock protects (e.g. its lock path)
  token bigint NOT NULL CHECK (token > 0) -- the highest fencing token admitted for it
);

-- The rule, enforced by the database for every writer: a name's token never goes down. An update
-- that would lower it fails with SQLSTATE ZF001, which aborts the writer's transaction, so its
-- data writes are rolled back too. Equal tokens pass: one grant may write many times.
--
-- An operator lowers a token on purpose (after the ZooKeeper ensemble was rebuilt from empty data
-- directories, say: its tokens start low again) in a transaction that says so, while no writer
-- runs:  BEGIN; SET LOCAL fence.allow_lowering = on; UPDATE fence SET token = ...; COMMIT;
CREATE OR REPLACE FUNCTION fence_refuse_lower_token() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF coalesce(current_setting('fence.allow_lowering', true), '') = 'on' THEN
    RETURN NEW;
  END IF;
  RAISE EXCEPTION 'stale fencing token % for %: token % was admitted before', NEW.token, OLD.name, OLD.token
    USING ERRCODE = 'ZF001',
          HINT = 'A later lock holder has written. Stop; do not retry with this token.';
END $$;

CREATE OR REPLACE TRIGGER fence_refuse_lower_token BEFORE UPDATE ON fence
  FOR EACH ROW WHEN (NEW.token < OLD.token) EXECUTE FUNCTION fence_refuse_lower_token();

-- The data this example guards: entries appended by whoever holds the lock. Every row a writer
-- inserts or updates carries the name it is fenced by and the writer's token.
CREATE TABLE IF NOT EXISTS entries (
  id    bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  name  text   NOT NULL REFERENCES fence (name),
  token bigint NOT NULL,
  value text   NOT NULL
);

-- The rule again, at COMMIT: a row written with a token commits only if that token is the one the
-- fence holds for its name then. A client that ignores the refusal above (psql's
-- ON_ERROR_ROLLBACK, a savepoint per statement, JDBC's autosave, an ORM's nested transaction)
-- rolls back only the failed upsert and could go on to commit its rows: this check fails its
-- COMMIT instead (ZF001), and nothing of the transaction is applied. It also refuses rows whose
-- writer never admitted its token (no upsert, or one that was rolled back). FOR SHARE waits for a
-- writer that is raising the fence right now, and compares with what it commits. Attach the same
-- trigger to every table the fence guards: each needs the columns name and token.
CREATE OR REPLACE FUNCTION fence_check_row_token() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  admitted bigint;
BEGIN
  SELECT token INTO admitted FROM fence WHERE name = NEW.name FOR SHARE;
  IF admitted IS NULL OR NEW.token < admitted THEN
    RAISE EXCEPTION 'stale fencing token % for % in %: token % was admitted before',
                    NEW.token, NEW.name, TG_TABLE_NAME, coalesce(admitted::text, 'none')
      USING ERRCODE = 'ZF001',
            HINT = 'A later lock holder has written, or this transaction''s fence upsert failed. '
                   'Stop; do not retry with this token.';
  ELSIF NEW.token > admitted THEN
    RAISE EXCEPTION 'unfenced write of % in %: token % was never admitted (the fence holds %)',
                    NEW.name, TG_TABLE_NAME, NEW.token, admitted
      USING ERRCODE = 'ZF002',
            HINT = 'Admit the token first, in the same transaction: the fence upsert.';
  END IF;
  RETURN NULL;
END $$;

DROP TRIGGER IF EXISTS entries_fenced_at_commit ON entries;
CREATE CONSTRAINT TRIGGER entries_fenced_at_commit AFTER INSERT OR UPDATE ON entries
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION fence_check_row_token();
