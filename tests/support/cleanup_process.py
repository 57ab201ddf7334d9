"""One ``run_housekeeping()`` in a process of its own, for the concurrency test (R-HK-13).

Usage: ``python -m tests.support.cleanup_process DATABASE_URL BATCH_SIZE GO_FILE``.
The process builds the app and connects, creates ``GO_FILE + ".<pid>.ready"``, waits
until ``GO_FILE`` exists (so two processes start their cleanup together), runs
housekeeping and prints its summary as one JSON line. An exception (a deadlock
error, say) ends it with a traceback on stderr and exit status 1.
"""

from __future__ import annotations

import json
import os
import sys
import time
from datetime import timedelta
from pathlib import Path

import sqlalchemy as sa

from flask_geneva import run_housekeeping
from tests.apps import basic

#: Retention the concurrency test's app uses; its eligible rows are far older.
RETENTION = timedelta(days=30)
#: Longest wait for the go file, in seconds (the test creates it within moments).
GO_TIMEOUT = 60.0


def main(database_url: str, batch_size: int, go_file: Path) -> None:
    """Build the app, wait for ``go_file``, run housekeeping, print the summary."""
    app = basic.create_app(
        database_url,
        GENEVA_DELETE_COMPLETED_WORKFLOWS_AFTER=RETENTION,
        GENEVA_HOUSEKEEPING_BATCH_SIZE=batch_size,
    )
    with app.app_context():
        basic.db.session.execute(sa.text("SELECT 1"))
        basic.db.session.rollback()
        Path(f"{go_file}.{os.getpid()}.ready").touch()
        deadline = time.monotonic() + GO_TIMEOUT
        while not go_file.exists():
            if time.monotonic() > deadline:
                raise SystemExit(f"{go_file} did not appear within {GO_TIMEOUT} s")
            time.sleep(0.01)
        summary = run_housekeeping()
    sys.stdout.write(json.dumps(summary) + "\n")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), Path(sys.argv[3]))
