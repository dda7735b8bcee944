"""A background worker: one loop on a daemon thread of its own, woken early, stopped.

Why it exists: the Kubernetes controller's workers (the job sync, the status
write-back, the pods-ready check) each run their loop on a thread of their
own. Starting, waking and stopping that thread is the same for all of them
and lives here once; a worker writes only its :meth:`Worker._run`, which
returns once ``_stopping`` is set and may wait on ``_event`` to be woken early.

What must stay true: :meth:`Worker.stop` sets ``_stopping`` before it wakes
the thread, so a woken loop sees it, and waits at most ten seconds for the
thread, so a worker stuck in a call cannot hang the service's shutdown.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod


class Worker(ABC):
    def __init__(self, thread_name: str) -> None:
        self._thread_name = thread_name
        self._event = threading.Event()  # set to wake the loop early
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._stopping.clear()
        self._thread = threading.Thread(target=self._run, name=self._thread_name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._event.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    @abstractmethod
    def _run(self) -> None:
        """The worker's loop, until ``_stopping`` is set."""
