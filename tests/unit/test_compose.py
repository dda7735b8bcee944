"""docker-compose.yml and the Dockerfile, checked by structure: there is no Docker engine here.

Parsing the files catches what a ``docker compose up`` would trip on first: a
missing service, an unpinned image, a port or healthcheck left out, or a
mounted host file that does not exist in the repository.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from queuemgr.controller.webhook_section import WEBHOOK_ENV
from queuemgr.service.settings import ENV, load_config

ROOT = Path(__file__).resolve().parents[2]
COMPOSE: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES: dict[str, Any] = COMPOSE["services"]


def test_the_four_services_are_there() -> None:
    assert set(SERVICES) == {"postgres", "queuemgr", "prometheus", "grafana"}


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_images_are_pinned_to_a_tag(name: str) -> None:
    image = SERVICES[name]["image"]
    repo, _, tag = image.rpartition(":")
    assert repo and "/" not in tag, f"{name}: {image} has no tag"
    assert tag != "latest" and re.fullmatch(r"v?\d+(\.\d+)+(-[\w.]+)?", tag), image


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_every_service_has_a_healthcheck_and_a_loopback_port(name: str) -> None:
    svc = SERVICES[name]
    check = svc["healthcheck"]
    assert check["test"][0] in ("CMD", "CMD-SHELL") and len(check["test"]) > 1
    assert {"interval", "timeout", "retries"} <= set(check)
    assert svc["ports"], name
    for port in svc["ports"]:
        # Published on the host's loopback only: nothing is exposed to the network.
        assert str(port).startswith("127.0.0.1:"), port


def test_ports_are_the_documented_ones() -> None:
    published = {n: [str(p).split(":")[1] for p in s["ports"]] for n, s in SERVICES.items()}
    assert published == {
        "postgres": ["5432"],
        "queuemgr": ["8080"],
        "prometheus": ["9090"],
        "grafana": ["3000"],
    }


def test_queuemgr_serves_the_simulated_backend_and_prometheus_scrapes_it() -> None:
    q = SERVICES["queuemgr"]
    assert q["build"] == "." and q["command"] == ["serve"]
    assert q["environment"]["QUEUEMGR_BACKEND"] == "simulated"
    assert q["depends_on"]["postgres"]["condition"] == "service_healthy"
    prom = yaml.safe_load((ROOT / "manifests/prometheus/prometheus.yml").read_text())
    (job,) = prom["scrape_configs"]
    assert job["scrape_interval"] == "5s"
    assert job["static_configs"][0]["targets"] == ["queuemgr:8080"]


def _host_mounts() -> list[tuple[str, str, str]]:
    out = []
    for name, svc in SERVICES.items():
        for volume in svc.get("volumes", []):
            source, target = str(volume).split(":")[:2]
            if source.startswith((".", "/")):
                out.append((name, source, target))
    return out


def test_named_volumes_are_declared() -> None:
    named = {
        str(v).split(":")[0]
        for s in SERVICES.values()
        for v in s.get("volumes", [])
        if not str(v).startswith((".", "/"))
    }
    assert named == {"postgres-data", "prometheus-data", "grafana-data"}
    assert named == set(COMPOSE["volumes"])


@pytest.mark.parametrize(("service", "source", "target"), _host_mounts())
def test_mounted_host_paths_exist_in_the_repository(service: str, source: str, target: str) -> None:
    assert source.startswith("./"), f"{service}: mount {source} is not relative to the repo"
    assert (ROOT / source).exists(), f"{service}: {source} does not exist"


def test_grafana_provisioning_points_at_the_mounted_dashboards() -> None:
    grafana = SERVICES["grafana"]
    targets = {t for s, _, t in _host_mounts() if s == "grafana"}
    provider = yaml.safe_load(
        (ROOT / "manifests/grafana/provisioning/dashboards/dashboards.yaml").read_text()
    )["providers"][0]
    folder = provider["options"]["path"]
    assert any(t.startswith(folder + "/") and t.endswith(".json") for t in targets)
    assert "/etc/grafana/provisioning" in targets
    home = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home in targets


def test_dockerfile_is_pinned_and_copies_files_that_exist() -> None:
    text = (ROOT / "Dockerfile").read_text()
    (base,) = re.findall(r"^FROM\s+(\S+)", text, flags=re.M)
    assert base.startswith("python:3.11.") and "latest" not in base
    for sources in re.findall(r"^COPY\s+(.+)\s+\S+$", text, flags=re.M):
        for src in sources.split():
            assert (ROOT / src).exists(), src


def test_the_compose_environment_is_a_valid_service_configuration() -> None:
    # Every QUEUEMGR_* variable must be one `queuemgr serve` reads, with the intended value.
    env = {k: str(v) for k, v in SERVICES["queuemgr"]["environment"].items()}
    known = set(ENV.values()) | set(WEBHOOK_ENV.values())
    assert {k for k in env if k.startswith("QUEUEMGR_")} <= known
    cfg = load_config(None, env=env)
    assert (cfg.backend, cfg.http_host, cfg.http_port) == ("simulated", "0.0.0.0", 8080)
    assert cfg.cluster_file == Path("/etc/queuemgr/cluster.yaml")
