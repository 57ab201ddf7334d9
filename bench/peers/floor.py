"""The physical floor of a database-backed durable step on PostgreSQL.

Each step is the minimum with flask_geneva's guarantees: one transaction to claim
(guarded UPDATE of the execution and the workflow), one to finish and schedule
the next step (UPDATE the execution, INSERT the next one, UPDATE the workflow).
Raw psycopg with prepared statements, the same one-active partial unique index.
N workflows x K steps, sequential. Usage::

    python bench/peers/floor.py --dsn postgresql://postgres@127.0.0.1:5432/test 300 10
    python bench/peers/floor.py --body writes-hero 300 10

``--body`` is what each step does, as in ``bench/step_overhead.py``: ``noop``;
``reads-hero`` SELECTs the workflow's hero row (``f_users``) and
``writes-hero`` SELECTs it and increments its ``counter``, both in the step's
second transaction, before its own writes (so the body's writes commit with
the step's); ``io`` sleeps 5 ms between the two transactions.

Creates (drops first) the tables ``f_users``, ``f_wf`` and ``f_exec``. The last line printed
is ``steps/s: <figure>``.
"""

from __future__ import annotations

import argparse
import time

import psycopg

BODIES = ("noop", "reads-hero", "writes-hero", "io")
IO_SECONDS = 0.005


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workflows", type=int)
    parser.add_argument("steps", type=int)
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/bench")
    parser.add_argument("--body", choices=BODIES, default="noop")
    args = parser.parse_args()
    count, steps_each, body = args.workflows, args.steps, args.body
    with psycopg.connect(args.dsn, autocommit=True) as setup:
        setup.execute(
            "DROP TABLE IF EXISTS f_exec; DROP TABLE IF EXISTS f_wf;"
            " DROP TABLE IF EXISTS f_users"
        )
        setup.execute(
            "CREATE TABLE f_users (id bigserial primary key, email varchar(255)"
            " not null, counter integer not null default 0)"
        )
        setup.execute(
            "CREATE TABLE f_wf (id bigserial primary key, type varchar(255) not null,"
            " hero_id bigint not null references f_users(id),"
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
        for number in range(count):
            cur.execute(
                "INSERT INTO f_users (email) VALUES (%s) RETURNING id",
                (f"u{number}@example.com",),
            )
            hero_id = cur.fetchone()[0]  # type: ignore[index]
            cur.execute(
                "INSERT INTO f_wf (type, hero_id, next_step_name) VALUES ('W', %s, 's0')"
                " RETURNING id",
                (hero_id,),
            )
            workflow_id = cur.fetchone()[0]  # type: ignore[index]
            cur.execute(
                "INSERT INTO f_exec (workflow_id, step_name) VALUES (%s, 's0')"
                " RETURNING id",
                (workflow_id,),
            )
            ids.append((workflow_id, hero_id, cur.fetchone()[0]))  # type: ignore[index]
        conn.commit()

        started = time.perf_counter()
        done = 0
        for workflow_id, hero_id, execution_id in ids:
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
                # The step's body.
                if body == "io":
                    time.sleep(IO_SECONDS)
                elif body != "noop":
                    cur.execute(
                        "SELECT id, email, counter FROM f_users WHERE id = %s",
                        (hero_id,),
                        prepare=True,
                    )
                    counter = cur.fetchone()[2]  # type: ignore[index]
                    if body == "writes-hero":
                        cur.execute(
                            "UPDATE f_users SET counter = %s WHERE id = %s",
                            (counter + 1, hero_id),
                            prepare=True,
                        )
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
        cur.execute("SELECT coalesce(sum(counter), 0) FROM f_users")
        counters = cur.fetchone()[0]  # type: ignore[index]
        conn.commit()
    with psycopg.connect(args.dsn, autocommit=True) as cleanup:
        cleanup.execute(
            "DROP TABLE IF EXISTS f_exec; DROP TABLE IF EXISTS f_wf;"
            " DROP TABLE IF EXISTS f_users"
        )
    if body == "writes-hero" and counters != done:
        raise SystemExit(f"the counters add up to {counters}, not {done}")
    print(
        f"floor: {done} steps in {elapsed:.2f} s ({1000 * elapsed / done:.2f} ms/step)"
    )
    print(f"steps/s: {done / elapsed:.1f}")


if __name__ == "__main__":
    main()
