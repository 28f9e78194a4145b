"""Connecting to any Temporal: TLS with a private CA, API keys, mTLS, profiles, one-line refusals.

The cluster is the session's dev server behind `TlsProxy`, a TLS-terminating gRPC proxy that
checks the `authorization` metadata of every call as Temporal Cloud does.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_asyncio

from openflow.connect import ConfigInvalid, connect, load_target
from openflow.engine.spec import Workflow
from openflow.server import EmbeddedServer, free_port
from openflow.testing import LocalRuns, agent_node
from tests.cli.conftest import Result, assert_one_line_error, openflow
from tests.cli.test_bad_input import in_process
from tests.connect.proxy import Authority, Pem, TlsProxy

pytestmark = pytest.mark.asyncio(loop_scope="session")

API_KEY = "tcld-key-0123456789abcdef"
WRONG_KEY = "tcld-key-not-the-right-one"
#: Every variable that could point a command elsewhere, blanked so only the test's settings count.
BLANK = {
    name: ""
    for name in (
        "OPENFLOW_TEMPORAL_ADDRESS",
        "OPENFLOW_NAMESPACE",
        *(n for n in os.environ if n.startswith("TEMPORAL_")),
    )
}


@dataclass(frozen=True)
class Pki:
    ca: Authority
    other: Authority
    server: Pem
    client: Pem


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    folder = tmp_path_factory.mktemp("pki")
    ca = Authority(folder / "ca")
    return Pki(
        ca=ca,
        other=Authority(folder / "other", "Some Other CA"),
        server=ca.issue("temporal-frontend", server=True),
        client=ca.issue("openflow-worker", server=False),
    )


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def cloud(temporal_server: EmbeddedServer, pki: Pki) -> AsyncIterator[TlsProxy]:
    """The dev server behind TLS (private CA) and an API key."""
    async with TlsProxy(temporal_server.address, pki.server, api_key=API_KEY) as proxy:
        yield proxy


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def mtls(temporal_server: EmbeddedServer, pki: Pki) -> AsyncIterator[TlsProxy]:
    """The dev server behind mutual TLS: a client certificate from the CA is required."""
    async with TlsProxy(temporal_server.address, pki.server, client_ca=pki.ca.pem.cert) as proxy:
        yield proxy


def cloud_env(proxy: TlsProxy, pki: Pki, home: Path, **extra: str) -> dict[str, str]:
    return {
        **BLANK,
        "OPENFLOW_HOME": str(home),
        "TEMPORAL_ADDRESS": proxy.address,
        "TEMPORAL_API_KEY": API_KEY,
        "TEMPORAL_TLS_SERVER_CA_CERT_PATH": str(pki.ca.pem.cert),
        **extra,
    }


def assert_no_key(*results: Result) -> None:
    for result in results:
        for key in (API_KEY, WRONG_KEY):
            assert key not in result.stdout + result.stderr


async def cli(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    env: Mapping[str, str],
    *args: str,
) -> Result:
    """`openflow ARGS` in this process with exactly `env`'s Temporal settings."""
    with monkeypatch.context() as patch:
        for name, value in env.items():
            if value:
                patch.setenv(name, value)
            else:
                patch.delenv(name, raising=False)
        return await in_process(capsys, *args)


async def test_the_cli_reaches_a_tls_cluster_with_an_api_key_and_says_what_fails(
    cloud: TlsProxy,
    pki: Pki,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    env = cloud_env(cloud, pki, tmp_path)
    wrong = {**env, "TEMPORAL_API_KEY": WRONG_KEY}
    # Real processes for the commands that start services; the rest in this process.
    processes = asyncio.gather(openflow(env, "runs", "list"), openflow(wrong, "worker"))
    cases: list[tuple[Mapping[str, str], tuple[str, ...]]] = [
        (wrong, ("authentication failed", "TEMPORAL_API_KEY")),
        ({**env, "TEMPORAL_API_KEY": ""}, ("authentication", "no API key")),
        (
            {**env, "TEMPORAL_TLS_SERVER_CA_CERT_PATH": str(pki.other.pem.cert)},
            ("TLS handshake", "TEMPORAL_TLS_SERVER_CA_CERT_PATH"),
        ),
        ({**env, "TEMPORAL_NAMESPACE": "no-such-ns"}, ("namespace 'no-such-ns'",)),
        (
            {**env, "TEMPORAL_ADDRESS": f"127.0.0.1:{free_port()}"},
            ("cannot reach Temporal", "connection refused"),
        ),
    ]
    refused = [await cli(monkeypatch, capsys, e, "runs", "list") for e, _ in cases]
    for (_, expected), result in zip(cases, refused, strict=True):
        assert_one_line_error(result, *expected)
    api = await cli(monkeypatch, capsys, wrong, "api", "--port", str(free_port()))
    ok, worker = await processes
    assert ok.code == 0, ok.stderr
    assert_one_line_error(worker, "authentication failed")
    assert_one_line_error(api, "authentication failed")
    assert_no_key(ok, worker, api, *refused)
    assert f"Bearer {API_KEY}" in cloud.seen_keys


async def test_a_bad_address_is_one_line_and_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    env = {**BLANK, "OPENFLOW_HOME": str(tmp_path)}
    cases = [
        ({"OPENFLOW_TEMPORAL_ADDRESS": "nonsense"}, ["runs", "list"]),
        ({"OPENFLOW_TEMPORAL_ADDRESS": "127.0.0.1:99999"}, ["runs", "show", "run-x"]),
        ({"TEMPORAL_ADDRESS": "http://temporal.example:7233"}, ["api"]),
    ]
    for case, args in cases:
        result = await cli(monkeypatch, capsys, {**env, **case}, *args)
        (source,) = case
        assert_one_line_error(result, "is not HOST:PORT", source)


async def test_a_run_completes_over_tls_with_an_api_key(
    cloud: TlsProxy, pki: Pki, tmp_path: Path
) -> None:
    env = cloud_env(cloud, pki, tmp_path)
    before = len(cloud.seen_keys)
    client = await connect(load_target(env))
    workflow = Workflow.model_validate(
        {"id": "wf-tls", "name": "TLS", "nodes": [agent_node("solo")], "edges": []}
    )
    async with LocalRuns(client=client, home=tmp_path, task_queue=f"tls-{uuid.uuid4()}") as local:
        outcome = await local.run(workflow, script={"solo": [{"submit": {"summary": "over TLS"}}]})
    assert outcome.status == "completed"
    assert outcome.outputs["solo"]["summary"] == "over TLS"
    assert set(cloud.seen_keys[before:]) == {f"Bearer {API_KEY}"}


async def test_mutual_tls_needs_the_client_certificate(
    mtls: TlsProxy,
    pki: Pki,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    env = {
        **BLANK,
        "OPENFLOW_HOME": str(tmp_path),
        "TEMPORAL_ADDRESS": mtls.address,
        "TEMPORAL_TLS_SERVER_CA_CERT_PATH": str(pki.ca.pem.cert),
    }
    with_cert = {
        **env,
        "TEMPORAL_TLS_CLIENT_CERT_PATH": str(pki.client.cert),
        "TEMPORAL_TLS_CLIENT_KEY_PATH": str(pki.client.key),
    }
    ok = await cli(monkeypatch, capsys, with_cert, "runs", "list")
    assert ok.code == 0, ok.stderr
    without = await cli(monkeypatch, capsys, env, "runs", "list")
    assert_one_line_error(without, "TLS handshake", "TEMPORAL_TLS_CLIENT_CERT_PATH")


async def test_profiles_come_from_the_toml_file(
    cloud: TlsProxy,
    pki: Pki,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = tmp_path / "temporal.toml"
    config.write_text(
        f"""
[profile.default]
address = "127.0.0.1:{free_port()}"

[profile.cloud]
address = "{cloud.address}"
namespace = "default"
api_key = "{API_KEY}"

[profile.cloud.tls]
server_ca_cert_path = "{pki.ca.pem.cert}"
"""
    )
    env = {**BLANK, "OPENFLOW_HOME": str(tmp_path), "TEMPORAL_CONFIG_FILE": str(config)}
    chosen = await cli(monkeypatch, capsys, {**env, "TEMPORAL_PROFILE": "cloud"}, "runs", "list")
    assert chosen.code == 0, chosen.stderr
    default = await cli(monkeypatch, capsys, env, "runs", "list")
    assert_one_line_error(default, "cannot reach Temporal")
    unknown = await cli(monkeypatch, capsys, {**env, "TEMPORAL_PROFILE": "staging"}, "runs", "list")
    assert_one_line_error(unknown, "'staging'", "TEMPORAL_PROFILE")
    missing = {**env, "TEMPORAL_CONFIG_FILE": str(tmp_path / "nope.toml")}
    assert_one_line_error(
        await cli(monkeypatch, capsys, missing, "runs", "list"), "TEMPORAL_CONFIG_FILE", "no such"
    )
    assert_no_key(chosen, default, unknown)


async def test_openflow_variables_win_and_keys_never_print(tmp_path: Path) -> None:
    env = {
        **BLANK,
        "TEMPORAL_ADDRESS": "temporal.example:7233",
        "TEMPORAL_NAMESPACE": "team",
        "TEMPORAL_API_KEY": API_KEY,
    }
    target = load_target(env)
    assert (target.address, target.namespace, target.secure) == (
        "temporal.example:7233",
        "team",
        True,
    )
    assert target.address_from == "TEMPORAL_ADDRESS"
    assert API_KEY not in repr(target) and API_KEY not in target.describe()
    ours = load_target(
        {**env, "OPENFLOW_TEMPORAL_ADDRESS": "10.0.0.5:7000", "OPENFLOW_NAMESPACE": "x"}
    )
    assert (ours.address, ours.namespace) == ("10.0.0.5:7000", "x")
    empty = {**BLANK, "TEMPORAL_API_KEY": "", "TEMPORAL_TLS": "", "TEMPORAL_NAMESPACE": ""}
    plain = load_target(empty)
    assert (plain.address, plain.namespace, plain.secure) == ("127.0.0.1:7233", "default", False)
    bad_toml = tmp_path / "bad.toml"
    bad_toml.write_text(f'[profile.default]\napi_key = "{API_KEY}\n')
    with pytest.raises(ConfigInvalid, match="not valid TOML") as caught:
        load_target({**BLANK, "TEMPORAL_CONFIG_FILE": str(bad_toml)})
    assert API_KEY not in str(caught.value)
    with pytest.raises(ConfigInvalid, match="cannot read TLS file"):
        load_target({**BLANK, "TEMPORAL_TLS_SERVER_CA_CERT_PATH": str(tmp_path / "no-ca.pem")})
