"""The API client the controller talks through: a kubeconfig or in-cluster identity, rate-limited.

Why it exists: a controller that bursts thousands of requests at the API
server after a restart (every job patched, every status written) is how
clusters fall over; client-go limits every client to a deliberate QPS with
a burst, and so does queuemgr. Every request of this client, watches
included, takes a token from one bucket first.

What must stay true: the bucket holds at most ``burst`` tokens and refills
at ``qps`` per second; a request waits for its token (never fails for
want of one); the limiter is shared by all threads of the client; the
connection pool is large enough for the long-lived watches plus the writes,
so a watch never waits for a connection.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubernetes import client, config
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

# The client's error, for the layers above: they name it from here, so that only
# this package imports ``kubernetes`` (.importlinter, kubernetes-in-its-adapter).
__all__ = ["ApiClient", "ApiException"]


class KubernetesUnavailable(ConnectionError):
    """No way to reach the Kubernetes API (neither in a pod nor a kubeconfig)."""


def load_api_client() -> ApiClient:
    """The pod's service account inside a cluster, else the kubeconfig (``KUBECONFIG``)."""
    configuration = client.Configuration()
    try:
        if os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_incluster_config(  # type: ignore[no-untyped-call]
                client_configuration=configuration
            )
        else:
            config.load_kube_config(  # type: ignore[no-untyped-call]
                client_configuration=configuration
            )
    except (ConfigException, OSError) as error:
        raise KubernetesUnavailable(
            f"webhook: cannot reach the Kubernetes API (not in a pod, and no usable"
            f" kubeconfig): {error}"
        ) from None
    return ApiClient(configuration)


def kubeconfig_client(path: str | None) -> ApiClient:
    """A user's client: the kubeconfig at ``path`` (else the default one), or the pod's
    identity inside a cluster when neither is set. KubernetesUnavailable if unusable."""
    try:
        if path is None and not os.environ.get("KUBECONFIG") and _in_cluster():
            config.load_incluster_config()  # type: ignore[no-untyped-call]
            return ApiClient()
        return config.new_client_from_config(config_file=path)  # type: ignore[no-any-return,no-untyped-call]
    except (ConfigException, OSError, TypeError) as exc:
        raise KubernetesUnavailable(f"kubeconfig {path or '(default)'}: {exc}") from None


def _in_cluster() -> bool:
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST"))


class RateLimiter:
    """A token bucket: ``burst`` requests at once, then ``qps`` per second."""

    def __init__(
        self,
        qps: float,
        burst: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError(f"rate limit: qps must be > 0 and burst >= 1, got {qps}, {burst}")
        self.qps = qps
        self.burst = burst
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._tokens = float(burst)
        self._at = clock()
        self.waited = 0.0  # seconds spent waiting for tokens, in total

    def reserve(self) -> float:
        """Take a token; the seconds the caller must wait before using it."""
        with self._lock:
            now = self._clock()
            self._tokens = min(self.burst, self._tokens + (now - self._at) * self.qps)
            self._at = now
            self._tokens -= 1.0
            delay = 0.0 if self._tokens >= 0 else -self._tokens / self.qps
            self.waited += delay
            return delay

    def acquire(self) -> float:
        delay = self.reserve()
        if delay > 0:
            self._sleep(delay)
        return delay


class RateLimitedApiClient(client.ApiClient):
    """``kubernetes.client.ApiClient`` whose every request first waits for the limiter."""

    def __init__(self, configuration: client.Configuration, limiter: RateLimiter) -> None:
        super().__init__(configuration)
        self.limiter = limiter

    def call_api(self, *args: Any, **kwargs: Any) -> Any:
        self.limiter.acquire()
        return super().call_api(*args, **kwargs)


def api_client(
    kubeconfig: Path | None,
    *,
    qps: float,
    burst: int,
    context: str | None = None,
    pool_size: int = 32,
) -> RateLimitedApiClient:
    """A rate-limited client from ``kubeconfig``, or the pod's service account when None."""
    configuration = client.Configuration()
    if kubeconfig is None:
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    else:
        config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=str(kubeconfig), context=context, client_configuration=configuration
        )
    configuration.connection_pool_maxsize = pool_size
    return RateLimitedApiClient(configuration, RateLimiter(qps, burst))
