"""List, then watch, one kind of Kubernetes object, keeping a local copy up to date.

Why it exists: queuemgr must follow Jobs, Pods and Nodes as they change
without polling the API server. A reflector lists once, then watches from the
list's ``resourceVersion``; every change updates its cache and calls the
handler. It is the one place that knows the watch protocol's failure modes.

What must stay true:

- after a dropped connection (or a watch that timed out) the watch resumes
  from the last ``resourceVersion`` seen, bookmarks included, so no event is
  missed and none is replayed;
- ``410 Gone`` (the version is too old, as after an API server restart)
  means a full relist, which reports objects that changed *and* objects
  deleted meanwhile (with their last known state), so the cache and the
  handler's view never drift from the server;
- any other error backs off exponentially (capped) and retries for ever,
  until :meth:`Reflector.stop`, which interrupts a blocked read at once;
- the handler is called from the reflector's one thread, never concurrently,
  after the cache holds the change; an exception in it is logged, never
  allowed to stop the watch;
- objects are plain dicts, exactly as the API serves them (camelCase keys),
  keyed by ``namespace/name`` (``name`` for cluster-scoped kinds).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Mapping
from enum import Enum
from typing import Any

from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

log = logging.getLogger(__name__)

Obj = dict[str, Any]
# A generated client's list call (e.g. ``CoreV1Api.list_node``) with its fixed arguments
# bound: called with ``_preload_content=False`` it returns the raw HTTP response, which
# is a JSON list, or, with ``watch=True``, a stream of JSON watch events, one per line.
Lister = Callable[..., Any]


class Change(Enum):
    ADDED = "ADDED"
    MODIFIED = "MODIFIED"
    DELETED = "DELETED"


Handler = Callable[[Change, Obj], None]


class Gone(Exception):
    """The watch's resourceVersion is too old: the reflector must list again."""


def key_of(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{ns}/{meta['name']}" if ns else str(meta["name"])


def version_of(obj: Mapping[str, Any]) -> str | None:
    version = (obj.get("metadata") or {}).get("resourceVersion")
    return None if version is None else str(version)


def newer(a: str | None, b: str | None) -> bool:
    """Whether version ``a`` is later than ``b`` (etcd's are integers; else: differs)."""
    if a is None or b is None:
        return a is not None
    try:
        return int(a) > int(b)
    except ValueError:
        return a != b


class Reflector:
    """Keeps ``cache`` equal to the server's objects of one kind; calls ``handler`` on changes."""

    def __init__(
        self,
        name: str,
        lister: Lister,
        handler: Handler,
        *,
        watch_timeout: int = 300,
        max_backoff: float = 10.0,
        page_size: int = 500,
    ) -> None:
        self.name = name
        self._list = lister
        self._handler = handler
        self._watch_timeout = watch_timeout
        self._max_backoff = max_backoff
        self._page_size = page_size
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._response: Any = None
        self._cache: dict[str, Obj] = {}
        self.resource_version: str | None = None
        self.synced = threading.Event()  # set after the first full list
        self.lists = 0  # full lists, the first one included
        self.watches = 0  # watch requests started

    # -- reading the cache (any thread) -------------------------------------------
    def get(self, key: str) -> Obj | None:
        with self._lock:
            return self._cache.get(key)

    def items(self) -> list[Obj]:
        with self._lock:
            return list(self._cache.values())

    def remember(self, obj: Obj) -> None:
        """Take an object a write just returned, if it is newer than the cached one.

        The watch delivers the same version moments later; this only spares
        readers the stale copy meanwhile. The handler is not called.
        """
        key = key_of(obj)
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None and newer(version_of(obj), version_of(cached)):
                self._cache[key] = obj

    # -- the protocol ----------------------------------------------------------------
    def relist(self) -> None:
        """List everything; report what appeared, changed or vanished since the cache."""
        fresh: dict[str, Obj] = {}
        version: str | None = None
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {"limit": self._page_size, "_preload_content": False}
            if token:
                kwargs["_continue"] = token
            page = _json(self._list(**kwargs))
            meta = page.get("metadata") or {}
            version = version or meta.get("resourceVersion")
            for obj in page.get("items") or ():
                fresh[key_of(obj)] = obj
            token = meta.get("continue")
            if not token:
                break
        with self._lock:
            old = self._cache
            self._cache = fresh
        for key, gone in old.items():
            if key not in fresh:
                self._call(Change.DELETED, gone)
        for key, obj in fresh.items():
            seen = old.get(key)
            if seen is None:
                self._call(Change.ADDED, obj)
            elif version_of(seen) != version_of(obj):
                self._call(Change.MODIFIED, obj)
        self.resource_version = version
        self.lists += 1
        self.synced.set()

    def watch_once(self) -> None:
        """One watch request, from the last version, until it ends, fails or is stopped."""
        self.watches += 1
        response = self._list(
            watch=True,
            resource_version=self.resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=self._watch_timeout,
            _preload_content=False,
            _request_timeout=(10, self._watch_timeout + 30),
        )
        self._response = response
        try:
            if self._stop.is_set():
                return
            for line in iter_resp_lines(response):  # type: ignore[no-untyped-call]
                if self._stop.is_set():
                    return
                if line.strip():
                    self._event(json.loads(line))
        finally:
            self._response = None
            response.close()
            release = getattr(response, "release_conn", None)
            if release is not None:
                release()

    def _event(self, event: Mapping[str, Any]) -> None:
        kind = event.get("type")
        obj = event.get("object") or {}
        if kind == "ERROR":
            code = obj.get("code")
            if code == 410:
                raise Gone(str(obj.get("message", "")))
            raise ApiException(status=code or 500, reason=str(obj.get("message")))
        version = version_of(obj)
        if kind in ("ADDED", "MODIFIED", "DELETED"):
            change = Change(kind)
            key = key_of(obj)
            with self._lock:
                if change is Change.DELETED:
                    self._cache.pop(key, None)
                else:
                    self._cache[key] = obj
            self._call(change, obj)
        if version:
            self.resource_version = version

    def _call(self, change: Change, obj: Obj) -> None:
        try:
            self._handler(change, obj)
        except Exception:  # a handler's bug must not stop the watch
            log.exception("%s: handler failed on %s %s", self.name, change.value, key_of(obj))

    # -- the thread ------------------------------------------------------------------
    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._run, name=f"reflector-{self.name}", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        response = self._response
        if response is not None:
            shutdown = getattr(response, "shutdown", None)  # urllib3 2.3+: unblocks a read
            try:
                (shutdown or response.close)()
            except Exception as exc:  # already closed
                log.debug("%s: closing the watch: %s", self.name, exc)
        if self._thread is not None:
            self._thread.join(timeout=10)

    def wait_synced(self, timeout: float) -> bool:
        return self.synced.wait(timeout)

    def _run(self) -> None:
        backoff = 0.2
        need_list = True
        while not self._stop.is_set():
            try:
                if need_list:
                    self.relist()
                    need_list = False
                self.watch_once()
                backoff = 0.2
            except Gone:
                log.info("%s: resource version too old; relisting", self.name)
                need_list = True
            except ApiException as exc:
                if exc.status == 410:
                    need_list = True
                    continue
                if self._stop.is_set():
                    break
                log.warning("%s: API error %s; retrying in %.1fs", self.name, exc.status, backoff)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, self._max_backoff)
            except Exception as exc:  # connection refused, reset, timeouts: keep trying
                if self._stop.is_set():
                    break
                log.warning("%s: watch failed (%s); retrying in %.1fs", self.name, exc, backoff)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, self._max_backoff)


def _json(response: Any) -> Obj:
    """The body of a raw list response (or an already decoded dict, from fakes)."""
    if isinstance(response, dict):
        return response
    try:
        data = response.data
    finally:
        release = getattr(response, "release_conn", None)
        if release is not None:
            release()
    decoded = json.loads(data)
    if not isinstance(decoded, dict):
        raise ValueError(f"a list response that is not an object: {type(decoded).__name__}")
    return decoded
