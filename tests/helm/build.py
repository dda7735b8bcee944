"""Build the ``helm`` command the chart tests run, from the Go module proxy.

    python -m tests.helm.build

builds ``helm.sh/helm/v4/cmd/helm`` at the version ``tests/helm/go.mod``
requires into a cache outside the repository:

    ${QUEUEMGR_HELM_CACHE:-${XDG_CACHE_HOME:-~/.cache}/queuemgr/helm}
        /helm-<version>/{helm,.stamp}

Why it exists: ``manifests/helm/queuemgr`` is checked with ``helm lint`` and
``helm template`` (tests/unit/test_helm_chart.py) and installed into the
integration tests' kube-apiserver (tests/integration/k8s/test_helm_chart.py).
No prebuilt binary is downloaded: helm is compiled from its module, as the
control plane is (``tests/controlplane/build.py``).

What must stay true:

* the helm version comes from ``go.mod`` alone (``require helm.sh/helm/v4``);
  bumping it there changes the directory name and the stamp;
* ``go.sum`` is complete: builds run with ``-mod=readonly`` and never edit the
  module, so run ``go mod tidy`` here after changing ``go.mod``;
* the stamp hashes ``go.mod``, ``go.sum``, the package and the flags; when it
  matches and the binary is there, nothing runs, so a warm call returns at once;
* builds share the control plane's file lock and error types, so concurrent
  test workers wait for one build instead of running two.

Exit status: 0 when the binary is there, 1 when a build failed, 2 when no
``go`` toolchain is on PATH.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.controlplane.build import (
    BuildError,
    GoMissing,
    build_lock,
    command_line,
    go_command,
    go_env,
    go_module_stamp,
    required_version,
    user_cache,
)

HERE = Path(__file__).resolve().parent
HELM_MODULE = "helm.sh/helm/v4"
HELM_VERSION = required_version(HERE / "go.mod", HELM_MODULE)
PACKAGE = f"{HELM_MODULE}/cmd/helm"
# As helm's own Makefile sets them, so `helm version` names the release.
LDFLAGS = " ".join(
    [
        "-s",
        "-w",
        f"-X {HELM_MODULE}/internal/version.version={HELM_VERSION}",
        f"-X {HELM_MODULE}/internal/version.gitTreeState=clean",
    ]
)


def cache_root() -> Path:
    return user_cache("QUEUEMGR_HELM_CACHE", "helm")


def directory() -> Path:
    return cache_root() / f"helm-{HELM_VERSION}"


def helm_path() -> Path:
    """Where the binary is (or will be) for the pinned version."""
    return directory() / "helm"


def stamp() -> str:
    return go_module_stamp(HERE, PACKAGE, LDFLAGS)


def is_built() -> bool:
    try:
        if (directory() / ".stamp").read_text().strip() != stamp():
            return False
    except OSError:
        return False
    return os.access(helm_path(), os.X_OK)


def _log(message: str) -> None:
    print(f"helm: {message}", file=sys.stderr, flush=True)


def _build(go: str) -> None:
    root = cache_root()
    staging = Path(tempfile.mkdtemp(prefix=f".helm-{HELM_VERSION}-", dir=root))
    staging.chmod(0o755)
    command = [go, "build", "-buildvcs=false", "-trimpath", "-ldflags", LDFLAGS]
    command += ["-o", str(staging / "helm"), PACKAGE]
    started = time.monotonic()
    _log(f"building helm {HELM_VERSION}; a cold build takes a few minutes")
    try:
        result = subprocess.run(command, cwd=HERE, env=go_env(), check=False)
        if result.returncode != 0:
            raise BuildError(
                f"`go build {PACKAGE}` failed with exit status {result.returncode}"
                " (module tests/helm)"
            )
        if not (staging / "helm").exists():
            raise BuildError(f"`go build {PACKAGE}` produced no helm")
        (staging / ".stamp").write_text(stamp() + "\n")
        if directory().exists():
            shutil.rmtree(directory())
        staging.rename(directory())
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    _log(f"built helm {HELM_VERSION} in {time.monotonic() - started:.0f} s")


def ensure_built() -> Path:
    """Build helm when missing; return its path. Raises GoMissing or BuildError."""
    if is_built():
        return helm_path()
    go = go_command()
    if go is None:
        raise GoMissing(
            "the `go` command is not on PATH: install Go 1.26+ to build helm"
            f" {HELM_VERSION} (`python -m tests.helm.build`)"
        )
    with build_lock(cache_root()):
        if not is_built():  # another process may have built it meanwhile
            _build(go)
    return helm_path()


def _describe(path: Path) -> list[str]:
    return [f"helm {HELM_VERSION}: {path}"]


def main(argv: list[str] | None = None) -> int:
    return command_line(
        argv,
        name="helm",
        doc=__doc__ or "",
        is_built=is_built,
        ensure_built=ensure_built,
        describe=_describe,
    )


if __name__ == "__main__":
    sys.exit(main())
