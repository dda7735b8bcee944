"""Build the Kubernetes control plane binaries that the integration tests run.

    python -m tests.controlplane.build

builds etcd, kube-apiserver, kube-controller-manager, kube-scheduler and
kubectl from the Go modules beside this file (``etcd/`` and ``kube/``), at the
versions their ``go.mod`` files pin, into a cache outside the repository:

    ${QUEUEMGR_CONTROLPLANE_CACHE:-${XDG_CACHE_HOME:-~/.cache}/queuemgr/controlplane}
        /kubernetes-<version>/{kube-apiserver,kube-controller-manager,kube-scheduler,kubectl}
        /etcd-<version>/etcd

Each directory carries a stamp (a hash of its module files and build flags);
when the stamp matches, nothing is built and the command returns at once. A
cold build compiles Kubernetes from source: expect tens of minutes on two
cores. Builds are serialized by a file lock, so concurrent test workers wait
for one build instead of running two.

Exit status: 0 when the binaries are there, 1 when a build failed, 2 when no
``go`` toolchain is on PATH.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

HERE = Path(__file__).resolve().parent
KUBE_MODULE = HERE / "kube"
ETCD_MODULE = HERE / "etcd"

KUBE_COMMANDS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")


class BuildError(RuntimeError):
    """A control plane binary could not be built."""


class GoMissing(BuildError):
    """No ``go`` command on PATH."""


def required_version(go_mod: Path, module: str) -> str:
    match = re.search(rf"^\s*(?:require\s+)?{re.escape(module)}\s+(v\S+)", go_mod.read_text(), re.M)
    if match is None:
        raise BuildError(f"{go_mod} does not require {module}")
    return match.group(1)


KUBERNETES_VERSION = required_version(KUBE_MODULE / "go.mod", "k8s.io/kubernetes")
ETCD_VERSION = required_version(ETCD_MODULE / "go.mod", "go.etcd.io/etcd/server/v3")


def user_cache(override_env: str, name: str) -> Path:
    """``$override_env`` if set, else ``queuemgr/<name>`` in the user's cache directory
    (``$XDG_CACHE_HOME``, default ``~/.cache``): builds live outside the repository."""
    override = os.environ.get(override_env)
    if override:
        return Path(override)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "queuemgr" / name


def go_module_stamp(folder: Path, *extra: str) -> str:
    """What a build from the Go module in ``folder`` depends on: its go.mod and go.sum,
    and ``extra`` (packages, flags)."""
    digest = hashlib.sha256()
    for part in ("go.mod", "go.sum"):
        digest.update(part.encode() + b"\0" + (folder / part).read_bytes() + b"\0")
    digest.update("\0".join(extra).encode())
    return digest.hexdigest()


def go_env(mod: str = "readonly") -> dict[str, str]:
    """The environment of a ``go build``: ``-mod=<mod>`` unless GOFLAGS sets one, no cgo."""
    env = dict(os.environ)
    if "-mod=" not in env.get("GOFLAGS", ""):
        env["GOFLAGS"] = (env.get("GOFLAGS", "") + f" -mod={mod}").strip()
    env.setdefault("CGO_ENABLED", "0")
    return env


def cache_root() -> Path:
    return user_cache("QUEUEMGR_CONTROLPLANE_CACHE", "controlplane")


@dataclass(frozen=True)
class Binaries:
    etcd: Path
    kube_apiserver: Path
    kube_controller_manager: Path
    kube_scheduler: Path
    kubectl: Path
    kubernetes_version: str = KUBERNETES_VERSION
    etcd_version: str = ETCD_VERSION


@dataclass(frozen=True)
class _Target:
    """One output directory, built by one ``go build`` from one module."""

    name: str
    module: Path
    packages: tuple[str, ...]
    outputs: tuple[str, ...]
    ldflags: str

    @property
    def directory(self) -> Path:
        return cache_root() / self.name

    def stamp(self) -> str:
        digest = hashlib.sha256()
        for part in ("go.mod", "go.sum", "main.go"):
            path = self.module / part
            if path.exists():
                digest.update(part.encode() + b"\0" + path.read_bytes() + b"\0")
        digest.update(" ".join(self.packages).encode() + b"\0" + self.ldflags.encode())
        return digest.hexdigest()

    def is_built(self) -> bool:
        stamp = self.directory / ".stamp"
        try:
            if stamp.read_text().strip() != self.stamp():
                return False
        except OSError:
            return False
        return all(os.access(self.directory / out, os.X_OK) for out in self.outputs)


def _kube_ldflags(version: str) -> str:
    major, minor = version.lstrip("v").split(".")[:2]
    values = {
        "gitVersion": version,
        "gitMajor": major,
        "gitMinor": minor,
        "gitTreeState": "clean",
    }
    flags = ["-s", "-w"]
    for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [f"-X {package}.{name}={value}" for name, value in values.items()]
    return " ".join(flags)


def _targets() -> tuple[_Target, _Target]:
    etcd = _Target(
        name=f"etcd-{ETCD_VERSION}",
        module=ETCD_MODULE,
        packages=(".",),
        outputs=("etcd",),
        ldflags="-s -w",
    )
    kube = _Target(
        name=f"kubernetes-{KUBERNETES_VERSION}",
        module=KUBE_MODULE,
        packages=tuple(f"k8s.io/kubernetes/cmd/{cmd}" for cmd in KUBE_COMMANDS),
        outputs=KUBE_COMMANDS,
        ldflags=_kube_ldflags(KUBERNETES_VERSION),
    )
    return etcd, kube


def binaries() -> Binaries:
    """Where the binaries are (or will be) for the pinned versions."""
    etcd, kube = _targets()
    return Binaries(
        etcd=etcd.directory / "etcd",
        kube_apiserver=kube.directory / "kube-apiserver",
        kube_controller_manager=kube.directory / "kube-controller-manager",
        kube_scheduler=kube.directory / "kube-scheduler",
        kubectl=kube.directory / "kubectl",
    )


def is_built() -> bool:
    return all(target.is_built() for target in _targets())


def go_command() -> str | None:
    return shutil.which("go")


@contextmanager
def build_lock(root: Path) -> Iterator[None]:
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".build.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _log(message: str) -> None:
    print(f"controlplane: {message}", file=sys.stderr, flush=True)


def _build(target: _Target, go: str) -> None:
    root = cache_root()
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=root))
    staging.chmod(0o755)
    env = go_env("mod")
    command = [go, "build", "-buildvcs=false", "-trimpath", "-ldflags", target.ldflags]
    command += ["-o", f"{staging}/", *target.packages]
    started = time.monotonic()
    _log(f"building {target.name} ({', '.join(target.outputs)}); a cold build takes a while")
    try:
        result = subprocess.run(command, cwd=target.module, env=env, check=False)
        if result.returncode != 0:
            raise BuildError(
                f"`go build` for {target.name} failed with exit status {result.returncode}"
                f" (module {target.module.relative_to(HERE.parent.parent)})"
            )
        missing = [out for out in target.outputs if not (staging / out).exists()]
        if missing:
            raise BuildError(f"`go build` for {target.name} produced no {', '.join(missing)}")
        (staging / ".stamp").write_text(target.stamp() + "\n")
        if target.directory.exists():
            shutil.rmtree(target.directory)
        staging.rename(target.directory)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    _log(f"built {target.name} in {time.monotonic() - started:.0f} s")


def ensure_built() -> Binaries:
    """Build whatever is missing for the pinned versions; return the paths.

    Raises :class:`GoMissing` when a build is needed and there is no ``go``,
    :class:`BuildError` when a build fails.
    """
    targets = _targets()
    if all(target.is_built() for target in targets):
        return binaries()
    go = go_command()
    if go is None:
        raise GoMissing(
            "the `go` command is not on PATH: install Go 1.26+ to build the Kubernetes"
            " control plane (etcd, kube-apiserver, ...) the integration tests run"
        )
    with build_lock(cache_root()):
        for target in targets:
            if not target.is_built():  # another process may have built it meanwhile
                _build(target, go)
    return binaries()


def command_line(
    argv: list[str] | None,
    *,
    name: str,
    doc: str,
    is_built: Callable[[], bool],
    ensure_built: Callable[[], T],
    describe: Callable[[T], list[str]],
) -> int:
    """The command line of a build script: ``--check``, or build and print ``describe``'s lines.

    Exit status 0 when built, 1 when ``--check`` finds nothing or a build failed, 2 when
    no ``go`` is on PATH; errors are one line on stderr, prefixed with ``name``.
    """
    parser = argparse.ArgumentParser(description=doc.split("\n")[0])
    parser.add_argument(
        "--check", action="store_true", help="only report whether the binaries are built"
    )
    args = parser.parse_args(argv)
    if args.check:
        built = is_built()
        print("built" if built else "not built")
        return 0 if built else 1
    started = time.monotonic()
    try:
        paths = ensure_built()
    except GoMissing as error:
        print(f"{name}: {error}", file=sys.stderr)
        return 2
    except (BuildError, OSError) as error:
        print(f"{name}: build failed: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{name}: interrupted", file=sys.stderr)
        return 1
    for line in describe(paths):
        print(line)
    print(f"ready in {time.monotonic() - started:.2f} s")
    return 0


def _describe(paths: Binaries) -> list[str]:
    names = ("etcd", "kube_apiserver", "kube_controller_manager", "kube_scheduler", "kubectl")
    return [f"kubernetes {paths.kubernetes_version}, etcd {paths.etcd_version}"] + [
        f"{n.replace('_', '-')}: {getattr(paths, n)}" for n in names
    ]


def main(argv: list[str] | None = None) -> int:
    return command_line(
        argv,
        name="controlplane",
        doc=__doc__ or "",
        is_built=is_built,
        ensure_built=ensure_built,
        describe=_describe,
    )


if __name__ == "__main__":
    sys.exit(main())
