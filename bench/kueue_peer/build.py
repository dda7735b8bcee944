"""Build Kueue's scheduler-perf binaries (minimalkueue, runner) from the Go module proxy.

    python bench/kueue_peer/build.py

Why it exists: ``bench/kueue_baseline.py`` compares queuemgr's simulated
figures with the numbers Kueue publishes for its ``configs/baseline``. To
measure Kueue itself on this machine, against the same etcd and kube-apiserver
the integration tests run (``tests/controlplane``), we need Kueue's own
``minimalkueue`` and ``runner``. They are ``package main`` inside
``sigs.k8s.io/kueue``, so the Go module beside this file lists them as ``tool``
directives and ``go build`` builds them by import path; no Kueue source is
copied into this repository.

Output, outside the repository:

    ${QUEUEMGR_KUEUE_PEER_CACHE:-${XDG_CACHE_HOME:-~/.cache}/queuemgr/kueue-peer}
        /kueue-<version>/{minimalkueue,runner,.stamp}

What must stay true:

* the Kueue version comes from ``go.mod`` alone (``require sigs.k8s.io/kueue``);
  bumping it there changes the directory name and the stamp;
* ``go.sum`` is complete: builds run with ``-mod=readonly`` and never edit the
  module, so run ``go mod tidy`` here after changing ``go.mod``;
* the stamp hashes ``go.mod``, ``go.sum``, the packages and the flags; when it
  matches and both binaries are there, nothing runs but ``go list`` (for the
  source path), so a warm call returns at once;
* builds share the control plane's file lock and error types
  (``tests/controlplane/build.py``), so concurrent callers wait for one build.

Exit status: 0 when the binaries are there, 1 when a build failed, 2 for a
usage error or when no ``go`` toolchain is on PATH.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.controlplane.build import (  # noqa: E402
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

KUEUE_MODULE = "sigs.k8s.io/kueue"
KUEUE_VERSION = required_version(HERE / "go.mod", KUEUE_MODULE)
PACKAGE_PREFIX = f"{KUEUE_MODULE}/test/performance/scheduler"
COMMANDS = ("minimalkueue", "runner")
PACKAGES = tuple(f"{PACKAGE_PREFIX}/{cmd}" for cmd in COMMANDS)
LDFLAGS = "-s -w"


@dataclass(frozen=True)
class KueueBinaries:
    minimalkueue: Path
    runner: Path
    source: Path  # the Kueue module in GOMODCACHE: CRDs and configs live there
    version: str = KUEUE_VERSION


def cache_root() -> Path:
    return user_cache("QUEUEMGR_KUEUE_PEER_CACHE", "kueue-peer")


def directory() -> Path:
    return cache_root() / f"kueue-{KUEUE_VERSION}"


def stamp() -> str:
    return go_module_stamp(HERE, " ".join(PACKAGES), LDFLAGS)


def is_built() -> bool:
    try:
        if (directory() / ".stamp").read_text().strip() != stamp():
            return False
    except OSError:
        return False
    return all(os.access(directory() / cmd, os.X_OK) for cmd in COMMANDS)


def _log(message: str) -> None:
    print(f"kueue-peer: {message}", file=sys.stderr, flush=True)


def _go(go: str, *args: str) -> str:
    """Run ``go args...`` in the module; return stdout, raise BuildError on failure."""
    result = subprocess.run(
        [go, *args], cwd=HERE, env=go_env(), capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        detail = result.stderr.strip().splitlines()[-5:]
        raise BuildError(f"`go {' '.join(args)}` failed: " + " / ".join(detail))
    return result.stdout.strip()


def source_dir(go: str) -> Path:
    """The Kueue module's directory in GOMODCACHE, downloading it if needed."""
    query = ("list", "-m", "-f", "{{.Dir}}", KUEUE_MODULE)
    found = _go(go, *query)
    if not found:
        _go(go, "mod", "download", KUEUE_MODULE)
        found = _go(go, *query)
    path = Path(found)
    if not (path / "config" / "components" / "crd" / "bases").is_dir():
        raise BuildError(f"{KUEUE_MODULE} source at {path} has no config/components/crd/bases")
    return path


def _build(go: str) -> None:
    root = cache_root()
    staging = Path(tempfile.mkdtemp(prefix=f".kueue-{KUEUE_VERSION}-", dir=root))
    staging.chmod(0o755)
    command = [go, "build", "-buildvcs=false", "-trimpath", "-ldflags", LDFLAGS]
    command += ["-o", f"{staging}/", *PACKAGES]
    started = time.monotonic()
    _log(f"building Kueue {KUEUE_VERSION} ({', '.join(COMMANDS)}); a cold build takes a while")
    try:
        result = subprocess.run(command, cwd=HERE, env=go_env(), check=False)
        if result.returncode != 0:
            raise BuildError(f"`go build` of Kueue's scheduler-perf failed ({result.returncode})")
        missing = [cmd for cmd in COMMANDS if not (staging / cmd).exists()]
        if missing:
            raise BuildError(f"`go build` produced no {', '.join(missing)}")
        (staging / ".stamp").write_text(stamp() + "\n")
        if directory().exists():
            shutil.rmtree(directory())
        staging.rename(directory())
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    _log(f"built Kueue {KUEUE_VERSION} in {time.monotonic() - started:.0f} s")


def ensure_built() -> KueueBinaries:
    """Build what is missing; return the paths. Raises GoMissing or BuildError."""
    go = go_command()
    if go is None:
        raise GoMissing("the `go` command is not on PATH: install Go 1.26+ to build Kueue")
    if not is_built():
        with build_lock(cache_root()):
            if not is_built():  # another process may have built it meanwhile
                _build(go)
    return KueueBinaries(
        minimalkueue=directory() / "minimalkueue",
        runner=directory() / "runner",
        source=source_dir(go),
    )


# minimalkueue v0.17.0 sets its client budget in code, with no flag; these are the lines.
BUDGET_SOURCE = "test/performance/scheduler/minimalkueue/main.go"
BUDGET_LINES = ("\tkubeConfig.QPS = 50\n", "\tkubeConfig.Burst = 100\n")
DEFAULT_BUDGET = (50, 100)


def budget_minimalkueue(qps: int, burst: int) -> Path:
    """minimalkueue with its client at ``qps`` / ``burst``, built once per budget.

    Go refuses overlays of files in GOMODCACHE, so the module's source is copied
    next to the binaries, its ``main.go`` gets the two numbers, and the build
    replaces the module with that copy through a scratch ``-modfile`` (this
    module's go.mod plus one ``replace``; its go.sum). Nothing but those two
    numbers differs from the module's source. The binary sits beside the others
    (``minimalkueue-qps<q>-burst<b>``), so a new Kueue build drops it. Raises
    BuildError when the lines are not there exactly once (another version).
    """
    paths = ensure_built()
    if (qps, burst) == DEFAULT_BUDGET:
        return paths.minimalkueue
    out = directory() / f"minimalkueue-qps{qps}-burst{burst}"
    if os.access(out, os.X_OK):
        return out
    go = go_command()
    assert go is not None  # ensure_built found it
    with build_lock(cache_root()):
        if os.access(out, os.X_OK):
            return out
        work = Path(tempfile.mkdtemp(prefix=".budget-", dir=cache_root()))
        try:
            copy = work / "kueue"
            shutil.copytree(paths.source, copy)
            for path in (copy, *copy.rglob("*")):
                path.chmod(path.stat().st_mode | 0o200)  # GOMODCACHE is read-only
            main = copy / BUDGET_SOURCE
            text = main.read_text()
            for line in BUDGET_LINES:
                if text.count(line) != 1:
                    raise BuildError(
                        f"{paths.source / BUDGET_SOURCE} does not set {line.strip()!r} exactly once"
                    )
            text = text.replace(BUDGET_LINES[0], f"\tkubeConfig.QPS = {qps}\n")
            main.write_text(text.replace(BUDGET_LINES[1], f"\tkubeConfig.Burst = {burst}\n"))
            modfile = work / "go.mod"
            modfile.write_text(
                (HERE / "go.mod").read_text() + f"\nreplace {KUEUE_MODULE} => {copy}\n"
            )
            shutil.copyfile(HERE / "go.sum", work / "go.sum")
            _log(f"building minimalkueue at QPS {qps} / burst {burst}")
            _go(
                go,
                "build",
                f"-modfile={modfile}",
                "-buildvcs=false",
                "-trimpath",
                "-ldflags",
                LDFLAGS,
                "-o",
                str(work / "minimalkueue"),
                f"{PACKAGE_PREFIX}/minimalkueue",
            )
            (work / "minimalkueue").rename(out)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return out


def _describe(paths: KueueBinaries) -> list[str]:
    return [
        f"kueue {paths.version}",
        f"minimalkueue: {paths.minimalkueue}",
        f"runner: {paths.runner}",
        f"kueue source: {paths.source}",
    ]


def main(argv: list[str] | None = None) -> int:
    return command_line(
        argv,
        name="kueue-peer",
        doc=__doc__ or "",
        is_built=is_built,
        ensure_built=ensure_built,
        describe=_describe,
    )


if __name__ == "__main__":
    sys.exit(main())
