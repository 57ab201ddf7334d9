"""The Celery consumer of flask_geneva workers: it survives a broker restart (R-FLT-60).

Celery's consumer handles a lost broker connection by collecting the connection
(``Connection.collect``), closing it, and reconnecting. With Celery 5.7 and
kombu's Redis transport the close can raise ``AttributeError`` ("'NoneType' object
has no attribute 'hostname'") when the broker went away while the worker waited
on it: ``collect()`` had cleared the transport's client but left kombu's default
channel half-closed, and closing that channel again builds a new Redis pool from
the cleared client. The error is no connection error, so it leaves the consumer,
Celery logs "Unrecoverable error" and the worker process exits (issue 41: one of
two workers died when Redis was restarted).

The same cleared client kills the worker a second way: a task that ran across
the reconnection is acknowledged on a channel of the lost connection, and the
Redis transport raises ``AttributeError`` there too, in the worker's event loop.

:class:`Consumer` is Celery's consumer with one method changed: an error raised
while Celery closes the connection it has already given up (``self.connection``
is None by then) is logged as a warning, the rest of Celery's handling of the
loss runs, and the consumer reconnects as it does after any connection error;
and the lost transport gets its client back, so that the late acknowledgement
reaches the broker (or fails with a connection error Celery logs).
``flask_geneva`` makes it a Celery app's ``worker_consumer`` when the app leaves
that setting at Celery's default (:func:`use_geneva_consumer`). Nothing a
worker held is lost: the rows are the truth, and the dispatcher and
housekeeping publish again what a lost message leaves ``scheduled``.
"""

from __future__ import annotations

from typing import Any

from celery.worker.consumer import Consumer as CeleryConsumer

from flask_geneva.core.tagged_logging import module_logger

__all__ = ["CONSUMER_PATH", "Consumer", "use_geneva_consumer"]

_log = module_logger("flask_geneva")

#: The ``worker_consumer`` setting naming :class:`Consumer`.
CONSUMER_PATH = "flask_geneva.ext.broker_consumer:Consumer"


class Consumer(CeleryConsumer):  # type: ignore[misc]
    """Celery's worker consumer, which a failing close of a lost broker
    connection does not stop (R-FLT-60).

    Set as a Celery app's ``worker_consumer`` by :func:`use_geneva_consumer`;
    every other behaviour is Celery's.
    """

    def on_connection_error_after_connected(self, exc: BaseException) -> None:
        """Celery's handling of a connection lost after it was established,
        surviving an error of the lost connection's close.

        Celery sets ``self.connection`` to None before it closes the lost
        connection; an exception raised after that (kombu's Redis transport
        raises ``AttributeError`` there) is logged, and Celery's handling runs
        again without a connection, so that what follows the close in it
        (cancelling long-running tasks when configured, the prefetch reduction)
        still happens. The consumer then reconnects with Celery's
        ``broker_connection_retry`` settings.

        Args:
            exc: The connection error that ended the consumer's loop.

        Raises:
            Exception: Whatever Celery's handling raised while the consumer still
                had its connection (not an error of the close).
        """
        lost = self.connection
        transport = getattr(lost, "transport", None) if lost is not None else None
        try:
            super().on_connection_error_after_connected(exc)
        except Exception as error:
            if lost is None or self.connection is not None:
                raise
            _log.warning(
                "closing the lost broker connection raised %r; the worker "
                "reconnects all the same",
                error,
            )
            super().on_connection_error_after_connected(exc)
        finally:
            _keep_client(transport, lost)


def _keep_client(transport: Any, connection: Any) -> None:
    """Give the lost connection's transport its ``client`` back.

    kombu's close sets ``transport.client`` to None, while the messages of
    tasks still running hold channels of that transport; acknowledging one after
    the reconnect then raises ``AttributeError`` from the Redis transport (it
    reads the broker's address from the client), which no ``Couldn't ack``
    handler catches, and the worker exits. With the client back, the late
    acknowledgement reaches the broker or fails with a connection error that
    Celery logs.
    """
    if transport is not None and getattr(transport, "client", False) is None:
        transport.client = connection


def use_geneva_consumer(celery: Any) -> None:
    """Make :class:`Consumer` ``celery``'s ``worker_consumer`` unless the host
    chose a consumer class of its own (R-FLT-60).

    Only a worker reads the setting; in any other process it changes nothing.

    Args:
        celery: A ``celery.Celery`` application.
    """
    from celery.app.defaults import DEFAULTS as CELERY_DEFAULTS

    if celery.conf.get("worker_consumer") == CELERY_DEFAULTS.get("worker_consumer"):
        celery.conf.worker_consumer = CONSUMER_PATH
