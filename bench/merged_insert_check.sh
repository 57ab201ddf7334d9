#!/bin/bash
# The evidence behind R-EXE-79 (issue 16): on PostgreSQL, a data-modifying CTE
# that moves an execution out of the one-active unique index (R-DM-09) and an
# INSERT ... SELECT reading that CTE's RETURNING, in ONE statement, insert the
# new active row without a unique violation, and insert nothing when the
# guarded UPDATE matches nothing (a lost race), also under concurrency.
#
# Usage: bench/merged_insert_check.sh [database]   (default test; uses schema
# merged_insert_check, dropped at the end; needs psql and pgbench, host
# 127.0.0.1, user postgres).
#
# Expected: (1) counts 1|1|<id>; (2) 0|1|<empty>, no new row; (3) and (4) the
# controls FAIL with a duplicate key (an INSERT not reading the CTE runs before
# it; an UPDATE that stays inside the index predicate); (5) each two-session
# race: the second statement waits, then inserts only if the first rolled
# back; (6) pgbench: no failed transaction, one in_progress row per workflow;
# (7) its control (INSERT not reading the execution's CTE): duplicate keys.
set -u
DB=${1:-test}
P="psql -h 127.0.0.1 -U postgres -d $DB -X -q -v ON_ERROR_STOP=0"
S=merged_insert_check
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

reset() {
  $P <<SQL
SET client_min_messages = warning;
DROP SCHEMA IF EXISTS $S CASCADE;
CREATE SCHEMA $S; SET search_path = $S;
CREATE TABLE wf (id bigserial PRIMARY KEY, state varchar(32) NOT NULL, next_step text);
CREATE TABLE ex (id bigserial PRIMARY KEY, workflow_id bigint NOT NULL, step text,
                 state varchar(32) NOT NULL);
CREATE UNIQUE INDEX one_active ON ex (workflow_id)
  WHERE state IN ('scheduled', 'in_progress', 'waiting');
INSERT INTO wf (state) VALUES ('performing'), ('performing'), ('performing');
INSERT INTO ex (workflow_id, step, state)
  VALUES (1, 's1', 'in_progress'), (2, 's1', 'in_progress'), (3, 's1', 'in_progress');
SQL
}

# Complete execution 1 (guarded) and insert workflow 1's next, in one statement.
MERGED="WITH a AS (UPDATE ex SET state = 'completed' WHERE id = 1 AND state = 'in_progress' RETURNING id),
 b AS (UPDATE wf SET next_step = 's2' WHERE id = 1 RETURNING id),
 c AS (INSERT INTO ex (workflow_id, step, state)
       SELECT 1, 's2-' || pg_backend_pid(), 'in_progress' FROM a JOIN b ON true RETURNING id)
SELECT (SELECT count(*) FROM a) AS exec_matched, (SELECT count(*) FROM b) AS wf_matched,
       (SELECT id FROM c) AS inserted;"

echo "== (1) one statement, the guard matches"
reset; $P -c "SET search_path = $S" -c "$MERGED" -c "SELECT id, step, state FROM ex WHERE workflow_id = 1 ORDER BY id"
echo "== (2) the same again: the guard matches nothing, nothing is inserted"
$P -c "SET search_path = $S" -c "$MERGED" -c "SELECT id, step, state FROM ex WHERE workflow_id = 1 ORDER BY id"
echo "== (3) control: an INSERT that does not read the CTE (must fail: duplicate key)"
reset; $P -c "SET search_path = $S" -c "WITH a AS (UPDATE ex SET state = 'completed' WHERE id = 1 RETURNING id)
  INSERT INTO ex (workflow_id, step, state) SELECT 1, 'x', 'in_progress' RETURNING id" 2>&1 | grep -o "duplicate key.*"
echo "== (4) control: the old row stays inside the index predicate (must fail: duplicate key)"
reset; $P -c "SET search_path = $S" -c "WITH a AS (UPDATE ex SET state = 'scheduled' WHERE id = 1 RETURNING id)
  INSERT INTO ex (workflow_id, step, state) SELECT 1, 'x', 'in_progress' FROM a RETURNING id" 2>&1 | grep -o "duplicate key.*"

race() {  # $1 title, $2 what session B does first (held 1.5 s), $3 COMMIT or ROLLBACK
  reset
  echo "== (5) $1"
  ( $P -c "SET search_path = $S" -c "BEGIN" -c "$2" -c "SELECT pg_sleep(1.5)" -c "$3" >/dev/null ) &
  sleep 0.5
  $P -c "SET search_path = $S" -c "$MERGED"
  wait
  $P -c "SELECT id, step, state FROM $S.ex WHERE workflow_id = 1 ORDER BY id"
}
race "B cancels the execution, commits" "UPDATE ex SET state = 'canceled' WHERE id = 1" COMMIT
race "B cancels the execution, rolls back" "UPDATE ex SET state = 'canceled' WHERE id = 1" ROLLBACK
race "B runs the same statement, commits" "$MERGED" COMMIT
race "B runs the same statement, rolls back" "$MERGED" ROLLBACK
race "B cancels it and inserts a scheduled one, commits" \
  "UPDATE ex SET state = 'canceled' WHERE id = 1; INSERT INTO ex (workflow_id, step, state) VALUES (1, 'sB', 'scheduled')" COMMIT

cat >"$TMP/chain.sql" <<SQL
\set w random(1, 3)
WITH cur AS (SELECT id FROM $S.ex WHERE workflow_id = :w AND state = 'in_progress'),
 a AS (UPDATE $S.ex SET state = 'completed' WHERE id = (SELECT id FROM cur) AND state = 'in_progress' RETURNING id),
 b AS (UPDATE $S.wf SET next_step = 'n' WHERE id = :w RETURNING id),
 c AS (INSERT INTO $S.ex (workflow_id, step, state) SELECT :w, 'n', 'in_progress' FROM a JOIN b ON true RETURNING id)
SELECT (SELECT count(*) FROM a), (SELECT count(*) FROM b), (SELECT id FROM c);
SQL
echo "== (6) pgbench: 4 sessions advance 3 chains for 10 s, no workflow lock"
reset; pgbench -h 127.0.0.1 -U postgres -n -c 4 -j 2 -T 10 -f "$TMP/chain.sql" "$DB" 2>&1 \
  | grep -E "processed|failed|duplicate"
$P -c "SELECT workflow_id, state, count(*) FROM $S.ex GROUP BY 1, 2 ORDER BY 1, 2"
echo "== (7) control: the INSERT reads the workflow's CTE only (expect duplicate keys)"
sed 's/FROM a JOIN b ON true/FROM b/' "$TMP/chain.sql" >"$TMP/control.sql"
reset; pgbench -h 127.0.0.1 -U postgres -n -c 4 -j 2 -T 3 -f "$TMP/control.sql" "$DB" 2>&1 \
  | grep -E "duplicate" | head -2
$P -c "SET client_min_messages = warning" -c "DROP SCHEMA $S CASCADE"
