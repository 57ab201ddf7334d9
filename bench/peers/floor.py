"""The physical floor of a database-backed durable step on PostgreSQL.

Each step is the minimum with flask_geneva's guarantees: one transaction to claim
(guarded UPDATE of the execution and the workflow), one to finish and schedule
the next step (UPDATE the execution, INSERT the next one, UPDATE the workflow).
Raw psycopg with prepared statements, the same one-active partial unique index.
N workflows x K no-op steps, sequential. Usage::

    python bench/peers/floor.py --dsn postgresql://postgres@127.0.0.1:5432/test 300 10

Creates (drops first) the tables ``f_wf`` and ``f_exec``. The last line printed
is ``steps/s: <figure>``.
"""

from __future__ import annotations

import argparse
import time

import psycopg


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workflows", type=int)
    parser.add_argument("steps", type=int)
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/bench")
    args = parser.parse_args()
    count, steps_each = args.workflows, args.steps
    with psycopg.connect(args.dsn, autocommit=True) as setup:
        setup.execute("DROP TABLE IF EXISTS f_exec; DROP TABLE IF EXISTS f_wf")
        setup.execute(
            "CREATE TABLE f_wf (id bigserial primary key, type varchar(255) not null,"
            " state varchar(255) not null default 'ready', current_step_name"
            " varchar(255), next_step_name varchar(255), created_at timestamptz not"
            " null default now(), updated_at timestamptz not null default now(),"
            " transitioned_at timestamptz)"
        )
        setup.execute(
            "CREATE TABLE f_exec (id bigserial primary key, workflow_id bigint not"
            " null references f_wf(id) on delete cascade, step_name varchar(255) not"
            " null, state varchar(255) not null default 'scheduled', outcome"
            " varchar(255), scheduled_for timestamptz not null default now(),"
            " started_at timestamptz, completed_at timestamptz, finished_at"
            " timestamptz, created_at timestamptz not null default now(), updated_at"
            " timestamptz not null default now())"
        )
        setup.execute(
            "CREATE UNIQUE INDEX f_one_active ON f_exec (workflow_id)"
            " WHERE state IN ('scheduled','in_progress')"
        )
        setup.execute("CREATE INDEX ON f_exec (workflow_id, created_at)")

    with psycopg.connect(args.dsn) as conn:
        cur = conn.cursor()
        ids = []
        for _ in range(count):
            cur.execute(
                "INSERT INTO f_wf (type, next_step_name) VALUES ('W', 's0') RETURNING id"
            )
            workflow_id = cur.fetchone()[0]  # type: ignore[index]
            cur.execute(
                "INSERT INTO f_exec (workflow_id, step_name) VALUES (%s, 's0')"
                " RETURNING id",
                (workflow_id,),
            )
            ids.append((workflow_id, cur.fetchone()[0]))  # type: ignore[index]
        conn.commit()

        started = time.perf_counter()
        done = 0
        for workflow_id, execution_id in ids:
            for k in range(steps_each):
                cur.execute(
                    "UPDATE f_exec SET state='in_progress', started_at=now(),"
                    " updated_at=now() WHERE id=%s AND state='scheduled'",
                    (execution_id,),
                    prepare=True,
                )
                assert cur.rowcount == 1
                cur.execute(
                    "UPDATE f_wf SET state='performing', current_step_name=%s,"
                    " updated_at=now() WHERE id=%s AND state IN ('ready','performing')",
                    (f"s{k}", workflow_id),
                    prepare=True,
                )
                conn.commit()
                # (the step body: nothing)
                cur.execute(
                    "UPDATE f_exec SET state='completed', outcome='success',"
                    " completed_at=now(), finished_at=now(), updated_at=now()"
                    " WHERE id=%s AND state='in_progress'",
                    (execution_id,),
                    prepare=True,
                )
                if k + 1 < steps_each:
                    cur.execute(
                        "INSERT INTO f_exec (workflow_id, step_name) VALUES (%s, %s)"
                        " RETURNING id",
                        (workflow_id, f"s{k + 1}"),
                        prepare=True,
                    )
                    execution_id = cur.fetchone()[0]  # type: ignore[index]
                    cur.execute(
                        "UPDATE f_wf SET state='ready', current_step_name=NULL,"
                        " next_step_name=%s, updated_at=now() WHERE id=%s",
                        (f"s{k + 1}", workflow_id),
                        prepare=True,
                    )
                else:
                    cur.execute(
                        "UPDATE f_wf SET state='finished', current_step_name=NULL,"
                        " next_step_name=NULL, transitioned_at=now(), updated_at=now()"
                        " WHERE id=%s",
                        (workflow_id,),
                        prepare=True,
                    )
                conn.commit()
                done += 1
        elapsed = time.perf_counter() - started
    with psycopg.connect(args.dsn, autocommit=True) as cleanup:
        cleanup.execute("DROP TABLE IF EXISTS f_exec; DROP TABLE IF EXISTS f_wf")
    print(
        f"floor: {done} steps in {elapsed:.2f} s ({1000 * elapsed / done:.2f} ms/step)"
    )
    print(f"steps/s: {done / elapsed:.1f}")


if __name__ == "__main__":
    main()
