"""The reflector against a scripted API server: resume, relist on 410, deletes seen by a relist."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

from urllib3.exceptions import ProtocolError

from queuemgr.k8s.apiclient import RateLimiter
from queuemgr.k8s.reflector import Change, Reflector


def obj(name: str, rv: int, **labels: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns", "resourceVersion": str(rv), "labels": labels}
    }


class Stream:
    """A watch response: scripted lines, then a drop (or a block until shut down)."""

    def __init__(self, events: list[dict[str, Any]], *, then: str) -> None:
        self.events = events
        self.then = then  # "drop", "end" or "block"
        self.closed = threading.Event()

    def stream(self, amt: Any = None, decode_content: bool = False) -> Iterator[bytes]:
        for e in self.events:
            yield (json.dumps(e) + "\n").encode()
        if self.then == "drop":
            raise ProtocolError("connection reset by peer")
        if self.then == "block":
            self.closed.wait(10)

    def shutdown(self) -> None:
        self.closed.set()

    def close(self) -> None:
        self.closed.set()

    def release_conn(self) -> None:
        pass


class Server:
    def __init__(self, lists: list[dict[str, Any]], watches: list[Stream]) -> None:
        self.lists = lists
        self.watches = watches
        self.calls: list[dict[str, Any]] = []

    def __call__(self, **kwargs: Any) -> Any:
        self.calls.append(kwargs)
        if kwargs.get("watch"):
            return self.watches.pop(0)
        return self.lists.pop(0)


def run(server: Server, until: int) -> tuple[Reflector, list[tuple[str, str, str]]]:
    seen: list[tuple[str, str, str]] = []
    done = threading.Event()

    def handler(change: Change, o: dict[str, Any]) -> None:
        seen.append((change.value, o["metadata"]["name"], o["metadata"]["resourceVersion"]))
        if len(seen) >= until:
            done.set()

    r = Reflector("test", server, handler, max_backoff=0.05)
    r.start()
    assert done.wait(10), seen
    return r, seen


def test_resumes_after_a_dropped_watch_from_the_last_version() -> None:
    server = Server(
        lists=[{"metadata": {"resourceVersion": "2"}, "items": [obj("a", 1), obj("b", 2)]}],
        watches=[
            Stream(
                [
                    {"type": "MODIFIED", "object": obj("a", 3)},
                    {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "5"}}},
                ],
                then="drop",
            ),
            Stream([{"type": "ADDED", "object": obj("c", 6)}], then="block"),
        ],
    )
    r, seen = run(server, until=4)
    r.stop()
    assert seen == [
        ("ADDED", "a", "1"),
        ("ADDED", "b", "2"),
        ("MODIFIED", "a", "3"),
        ("ADDED", "c", "6"),
    ]
    watches = [c for c in server.calls if c.get("watch")]
    assert [w["resource_version"] for w in watches] == ["2", "5"]  # the bookmark counts
    assert r.lists == 1
    assert {o["metadata"]["name"] for o in r.items()} == {"a", "b", "c"}


def test_relists_on_410_and_reports_deletes_it_missed() -> None:
    server = Server(
        lists=[
            {"metadata": {"resourceVersion": "2"}, "items": [obj("a", 1), obj("b", 2)]},
            # b was deleted and d created while the watch was away; a unchanged.
            {"metadata": {"resourceVersion": "9"}, "items": [obj("a", 1), obj("d", 8)]},
        ],
        watches=[
            Stream([{"type": "ERROR", "object": {"code": 410, "message": "too old"}}], then="end"),
            Stream([{"type": "DELETED", "object": obj("a", 10)}], then="block"),
        ],
    )
    r, seen = run(server, until=5)
    r.stop()
    assert seen == [
        ("ADDED", "a", "1"),
        ("ADDED", "b", "2"),
        ("DELETED", "b", "2"),  # with its last known state
        ("ADDED", "d", "8"),
        ("DELETED", "a", "10"),
    ]
    watches = [c for c in server.calls if c.get("watch")]
    assert [w["resource_version"] for w in watches] == ["2", "9"]
    assert r.lists == 2
    assert [o["metadata"]["name"] for o in r.items()] == ["d"]


def test_a_failing_handler_does_not_stop_the_watch() -> None:
    calls: list[str] = []
    done = threading.Event()

    def handler(change: Change, o: dict[str, Any]) -> None:
        calls.append(o["metadata"]["name"])
        if o["metadata"]["name"] == "a":
            raise RuntimeError("bug")
        done.set()

    server = Server(
        lists=[{"metadata": {"resourceVersion": "1"}, "items": [obj("a", 1)]}],
        watches=[Stream([{"type": "ADDED", "object": obj("b", 2)}], then="block")],
    )
    r = Reflector("test", server, handler)
    r.start()
    assert done.wait(10)
    r.stop()
    assert calls == ["a", "b"]


def test_stop_interrupts_a_blocked_watch_at_once() -> None:
    server = Server(
        lists=[{"metadata": {"resourceVersion": "1"}, "items": []}],
        watches=[Stream([], then="block")],
    )
    r = Reflector("test", server, lambda c, o: None)
    r.start()
    assert r.wait_synced(5)
    import time

    started = time.monotonic()
    r.stop()
    assert time.monotonic() - started < 2


def test_rate_limiter_allows_a_burst_then_paces_at_qps() -> None:
    now = [0.0]
    slept: list[float] = []

    def sleep(s: float) -> None:
        slept.append(s)
        now[0] += s

    limiter = RateLimiter(10, 3, clock=lambda: now[0], sleep=sleep)
    for _ in range(5):
        limiter.acquire()
    assert slept == [0.1, 0.1]  # three at once, then one every 1/qps seconds
    now[0] += 10  # idle: the bucket refills to the burst, no further
    for _ in range(3):
        limiter.acquire()
    assert len(slept) == 2
