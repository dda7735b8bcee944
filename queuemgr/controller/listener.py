"""Postgres LISTEN on channel ``queuemgr``: a notification wakes the scheduler loop.

Why it exists: submit -> admitted must take milliseconds, not a polling
interval. Writers NOTIFY in the transaction of their change
(:mod:`queuemgr.store.notify`); this thread LISTENs on a connection of its own
(:func:`queuemgr.store.notify.listen`) and wakes the loop at each notification.

What must stay true: a notification only ever *wakes* the loop, which then
reloads everything, so coalesced or lost notifications cost latency, never
correctness. After a lost connection it reconnects with backoff and wakes the
loop once (anything may have happened meanwhile).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from queuemgr.store.errors import StoreError
from queuemgr.store.handle import Database
from queuemgr.store.notify import listen

log = logging.getLogger(__name__)


class NotifyListener:
    def __init__(self, db: Database, wake: Callable[[], None]) -> None:
        self._db = db
        self._wake = wake
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.listening = threading.Event()

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="queuemgr-listen", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        backoff = 0.1
        while not self._stop.is_set():
            try:
                with listen(self._db) as channel:
                    self.listening.set()
                    self._wake()  # whatever happened while we were not listening
                    backoff = 0.1
                    while not self._stop.is_set():
                        # The timeout bounds how long stop() waits for this thread.
                        for _ in channel.notifications(timeout=0.5):
                            self._wake()
            except StoreError as exc:
                self.listening.clear()
                log.warning("LISTEN connection lost (%s); retrying in %.1fs", exc, backoff)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 5.0)
        self.listening.clear()
