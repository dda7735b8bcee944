"""The ``webhook:`` section of ``queuemgr serve``'s configuration and its variables."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from queuemgr.cli.main import main
from queuemgr.controller.webhook_section import WEBHOOK_ENV, WebhookConfig
from queuemgr.k8s.selectors import LabelSelector
from queuemgr.service.settings import ConfigError, load_config


def _load(tmp_path: Path, text: str, env: dict[str, str] | None = None) -> WebhookConfig:
    path = tmp_path / "serve.yaml"
    path.write_text(text)
    return load_config(path, env=env or {}).webhook


def _secret(directory: Path, *, ca: bool = True) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    files = ("tls.crt", "tls.key", "ca.crt") if ca else ("tls.crt", "tls.key")
    for name in files:
        (directory / name).write_text("PEM\n")
    return directory


def test_absent_section_means_no_webhook(tmp_path: Path) -> None:
    assert _load(tmp_path, "cycle_interval: 5\n") == WebhookConfig()
    assert not WebhookConfig().enabled


def test_every_key_from_the_file(tmp_path: Path) -> None:
    _secret(tmp_path / "certs")
    config = _load(
        tmp_path,
        """
webhook:
  enabled: true
  address: 127.0.0.1:10443
  cert_dir: certs
  service: qm-webhook
  namespace: ops
  patch_ca_bundle: true
  mutating_configuration: qm-mutating
  validating_configuration: qm-validating
  managed_namespaces: queuemgr.io/managed=true,team in (a,b)
  allow_on_store_outage: false
  gpu_resources: [nvidia.com/gpu, amd.com/gpu]
""",
    )
    assert config.enabled and config.patch_ca_bundle and not config.allow_on_store_outage
    assert (config.host, config.port) == ("127.0.0.1", 10443)
    assert config.cert_dir == tmp_path / "certs"  # relative to the configuration file
    assert config.cert_file == tmp_path / "certs" / "tls.crt"
    assert (config.service, config.namespace) == ("qm-webhook", "ops")
    assert config.mutating_configuration == "qm-mutating"
    assert config.validating_configuration == "qm-validating"
    assert config.managed_namespaces == LabelSelector.parse(
        "queuemgr.io/managed=true,team in (a,b)"
    )
    assert config.gpu_resources == frozenset({"nvidia.com/gpu", "amd.com/gpu"})


def test_the_json_selector_form(tmp_path: Path) -> None:
    config = _load(
        tmp_path,
        "webhook:\n  managed_namespaces:\n    matchLabels: {queuemgr.io/managed: 'true'}\n",
    )
    assert config.managed_namespaces.as_json() == {"matchLabels": {"queuemgr.io/managed": "true"}}


def test_the_environment_wins(tmp_path: Path) -> None:
    config = _load(
        tmp_path,
        "webhook: {enabled: false, address: 0.0.0.0:9443, namespace: queuemgr-system}\n",
        {
            "QUEUEMGR_WEBHOOK_ENABLED": "true",
            "QUEUEMGR_WEBHOOK_SELF_SIGNED": "yes",
            "QUEUEMGR_WEBHOOK_ADDRESS": "[::1]:0",
            "QUEUEMGR_WEBHOOK_NAMESPACE": "elsewhere",
            "QUEUEMGR_WEBHOOK_DNS_NAMES": "localhost, webhook.example.com",
            "QUEUEMGR_WEBHOOK_IP_ADDRESSES": "127.0.0.1,::1",
            "QUEUEMGR_WEBHOOK_PATCH_CA_BUNDLE": "1",
            "QUEUEMGR_WEBHOOK_MANAGED_NAMESPACES": "kubernetes.io/metadata.name=team-a",
        },
    )
    assert config.enabled and config.self_signed and config.patch_ca_bundle
    assert (config.host, config.port, config.namespace) == ("::1", 0, "elsewhere")
    assert config.dns_names == ("localhost", "webhook.example.com")
    assert config.ip_addresses == ("127.0.0.1", "::1")
    assert config.managed_namespaces.matches({"kubernetes.io/metadata.name": "team-a"})


def test_the_variables_are_documented() -> None:
    docs = (Path(__file__).parents[3] / "docs" / "operations.md").read_text()
    for key, var in WEBHOOK_ENV.items():
        assert f"`{key}`" in docs and f"`{var}`" in docs, key


@pytest.mark.parametrize(
    ("text", "env", "named"),
    [
        ("webhook: {bogus: 1}\n", {}, "webhook.bogus"),
        ("webhook: [enabled]\n", {}, "webhook"),
        ("webhook: {enabled: maybe}\n", {}, "webhook.enabled"),
        ("webhook: {address: '9443'}\n", {}, "webhook.address"),
        ("webhook: {namespace: Not_A_Label}\n", {}, "webhook.namespace"),
        ("webhook: {dns_names: ['bad name']}\n", {}, "webhook.dns_names"),
        ("webhook: {ip_addresses: [10.0.0.300]}\n", {}, "webhook.ip_addresses"),
        ("webhook: {managed_namespaces: 'a in ()'}\n", {}, "webhook.managed_namespaces"),
        (
            "webhook: {managed_namespaces: {matchExpressions: [{key: a, operator: Near}]}}\n",
            {},
            "webhook.managed_namespaces",
        ),
        ("webhook: {gpu_resources: []}\n", {}, "webhook.gpu_resources"),
        ("webhook: {enabled: true}\n", {}, "webhook.cert_dir"),
        ("webhook: {enabled: true, cert_dir: missing}\n", {}, "webhook.cert_dir"),
        ("webhook: {cert_dir: certs, self_signed: true}\n", {}, "webhook.self_signed"),
        ("", {"QUEUEMGR_WEBHOOK_ENABLED": "sometimes"}, "QUEUEMGR_WEBHOOK_ENABLED"),
        ("", {"QUEUEMGR_WEBHOOK_ADDRESS": "host:port"}, "QUEUEMGR_WEBHOOK_ADDRESS"),
        (
            "webhook: {enabled: true}\n",
            {"QUEUEMGR_WEBHOOK_CERT_DIR": "/nonexistent/certs"},
            "QUEUEMGR_WEBHOOK_CERT_DIR",
        ),
    ],
)
def test_a_bad_value_names_its_key_and_serve_exits_2(
    tmp_path: Path, text: str, env: dict[str, str], named: str
) -> None:
    path = tmp_path / "serve.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=named.replace(".", r"\.")):
        load_config(path, env=env)
    result = CliRunner().invoke(main, ["serve", "--config", str(path)], env=env)
    assert result.exit_code == 2, result.output
    assert named in result.output and "Traceback" not in result.output


def test_patching_needs_a_ca(tmp_path: Path) -> None:
    _secret(tmp_path / "certs", ca=False)
    text = "webhook: {enabled: true, cert_dir: certs, patch_ca_bundle: true}\n"
    with pytest.raises(ConfigError, match=r"webhook\.patch_ca_bundle: .*no ca\.crt"):
        _load(tmp_path, text)
    _secret(tmp_path / "certs")
    assert _load(tmp_path, text).patch_ca_bundle


def test_a_disabled_webhook_reads_no_files(tmp_path: Path) -> None:
    config = _load(tmp_path, "webhook: {enabled: false, cert_dir: nowhere}\n")
    assert config.cert_dir == tmp_path / "nowhere" and not config.enabled
