"""DBOS Transact: N workflows x K steps, sequential, one body per step.

The same shape as ``bench/step_overhead.py`` (in one process, one PostgreSQL).
Needs ``pip install dbos`` (the ``bench`` extra). Usage::

    python bench/peers/dbos_bench.py --dsn postgresql://postgres@127.0.0.1:5432/test 300 10
    python bench/peers/dbos_bench.py --body writes-hero 300 10

``--body`` is what each step does, as in ``bench/step_overhead.py``: ``noop``
(a ``@DBOS.step``); ``reads-hero`` (SELECT the workflow's hero row) and
``writes-hero`` (SELECT it and increment its ``counter``), each a transaction
step of a DBOS ``SQLAlchemyDatasource`` (DBOS 3's ``@DBOS.transaction``: the
step's writes and its checkpoint commit in one transaction), at READ COMMITTED
as flask_geneva's sessions run; ``io`` a ``@DBOS.step`` sleeping 5 ms.

DBOS keeps its system tables in the ``--dsn`` database (it creates them); the
heroes are the table ``d_users`` there (dropped first). The last line printed
is ``steps/s: <figure>``.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import sqlalchemy as sa

BODIES = ("noop", "reads-hero", "writes-hero", "io")
IO_SECONDS = 0.005


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workflows", type=int)
    parser.add_argument("steps", type=int)
    parser.add_argument(
        "--dsn", default="postgresql://postgres@127.0.0.1:5432/dbos_bench"
    )
    parser.add_argument("--body", choices=BODIES, default="noop")
    args = parser.parse_args()
    try:
        from dbos import DBOS
        from dbos import SQLAlchemyDatasource
    except ImportError:
        raise SystemExit(
            "dbos is not installed: pip install -e '.[bench]' (or pip install dbos)"
        ) from None

    url = sa.make_url(args.dsn).set(drivername="postgresql+psycopg")
    setup = sa.create_engine(url)
    with setup.begin() as connection:
        connection.execute(sa.text("DROP TABLE IF EXISTS d_users"))
        connection.execute(
            sa.text(
                "CREATE TABLE d_users (id bigserial primary key, email varchar(255)"
                " not null, counter integer not null default 0)"
            )
        )
        connection.execute(
            sa.text("INSERT INTO d_users (email) VALUES (:email)"),
            [{"email": f"u{i}@example.com"} for i in range(args.workflows + 1)],
        )
        hero_ids = list(
            connection.scalars(sa.text("SELECT id FROM d_users ORDER BY id"))
        )

    DBOS(config={"name": "bench", "system_database_url": args.dsn})
    source = SQLAlchemyDatasource.create(url.render_as_string(hide_password=False))
    select_hero = sa.text("SELECT id, email, counter FROM d_users WHERE id = :id")
    update_hero = sa.text("UPDATE d_users SET counter = :counter WHERE id = :id")

    @DBOS.step()
    def noop(hero_id: int) -> int:
        return hero_id

    @DBOS.step()
    def io(hero_id: int) -> int:
        time.sleep(IO_SECONDS)
        return hero_id

    @source.transaction(isolation_level="READ COMMITTED")
    def reads_hero(hero_id: int) -> int:
        row = source.sql_session().execute(select_hero, {"id": hero_id}).one()
        return int(row.id)

    @source.transaction(isolation_level="READ COMMITTED")
    def writes_hero(hero_id: int) -> int:
        session = source.sql_session()
        row = session.execute(select_hero, {"id": hero_id}).one()
        session.execute(update_hero, {"counter": row.counter + 1, "id": hero_id})
        return int(row.id)

    body: Any = {
        "noop": noop,
        "reads-hero": reads_hero,
        "writes-hero": writes_hero,
        "io": io,
    }[args.body]

    @DBOS.workflow()
    def workflow(k: int, hero_id: int) -> int:
        total = 0
        for _ in range(k):
            total += body(hero_id)
        return total

    DBOS.launch()
    workflow(2, hero_ids[-1])  # warm up (the last hero is the warm-up's)
    started = time.perf_counter()
    for hero_id in hero_ids[:-1]:
        workflow(args.steps, hero_id)
    elapsed = time.perf_counter() - started
    DBOS.destroy()
    steps = args.workflows * args.steps
    with setup.begin() as connection:
        counters = connection.scalar(
            sa.text("SELECT coalesce(sum(counter), 0) FROM d_users WHERE id < :last"),
            {"last": hero_ids[-1]},
        )
        connection.execute(sa.text("DROP TABLE IF EXISTS d_users"))
    setup.dispose()
    if args.body == "writes-hero" and counters != steps:
        raise SystemExit(f"the counters add up to {counters}, not {steps}")
    print(
        f"dbos: {steps} steps in {elapsed:.2f} s ({1000 * elapsed / steps:.2f} ms/step)"
    )
    print(f"steps/s: {steps / elapsed:.1f}")


if __name__ == "__main__":
    main()
