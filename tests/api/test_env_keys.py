"""OPENFLOW_API_KEYS: tenant keys from the environment or a mounted file, no settings.json edit."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import httpx
import pytest

from openflow.api.auth import ApiKeysInvalid, TenantKeys, parse_api_keys
from openflow.api.errors import Unauthorized
from openflow.server import EmbeddedServer, free_port
from tests.api.conftest import KEY_A, KEY_B, set_keys
from tests.cli.conftest import assert_one_line_error, cli_env
from tests.cli.test_bad_input import in_process

pytestmark = pytest.mark.asyncio(loop_scope="session")

SECRET = "sk-live-do-not-print-me"


async def test_both_forms_parse_and_errors_never_quote_a_key(tmp_path: Path) -> None:
    assert parse_api_keys(f" {KEY_A}=tenant-a , {KEY_B}=tenant-b,") == {
        KEY_A: "tenant-a",
        KEY_B: "tenant-b",
    }
    assert parse_api_keys("YmFzZTY0a2V5==tenant-c") == {"YmFzZTY0a2V5=": "tenant-c"}
    assert parse_api_keys("") == {}
    listed = tmp_path / "keys"
    listed.write_text(f"# team keys\n{KEY_A}=tenant-a\n\n  {KEY_B} = tenant-b  \n")
    assert parse_api_keys(f"@{listed}") == {KEY_A: "tenant-a", KEY_B: "tenant-b"}

    broken = tmp_path / "broken"
    broken.write_text(f"{KEY_A}=tenant-a\n{SECRET}\n")
    cases = [
        (SECRET, "entry 1 of 1 is not KEY=TENANT"),
        (f"{KEY_A}=a,{SECRET}=", "entry 2 of 2 is not KEY=TENANT"),
        (f"={SECRET}", "entry 1 of 1"),
        (f"{SECRET}=a,{SECRET}=b", "another tenant"),
        (f"@{broken}", "line 2 of"),
        (f"@{tmp_path / 'absent'}", "no such file"),
        ("@", "names no file"),
    ]
    for value, expected in cases:
        with pytest.raises(ApiKeysInvalid) as caught:
            parse_api_keys(value)
        message = str(caught.value)
        assert message.startswith("OPENFLOW_API_KEYS"), message
        assert expected in message, message
        assert SECRET not in message and KEY_A not in message


async def test_env_keys_join_settings_keys_and_a_file_follows_its_changes(tmp_path: Path) -> None:
    set_keys(tmp_path, {KEY_A: "from-settings"})
    listed = tmp_path / "keys"
    listed.write_text(f"{KEY_B}=tenant-b\n")
    keys = TenantKeys(tmp_path, env_keys=f"@{listed}")
    assert keys.tenant_for(KEY_A) == "from-settings"
    assert keys.tenant_for(KEY_B) == "tenant-b"
    listed.write_text(f"{KEY_B}=tenant-b2\n{KEY_A}=tenant-a\n")
    assert keys.tenant_for(KEY_B) == "tenant-b2"
    assert keys.tenant_for(KEY_A) == "tenant-a"  # the variable wins over settings.json
    listed.write_text("")
    with pytest.raises(Unauthorized):
        keys.tenant_for(KEY_B)


async def test_the_api_binds_beyond_loopback_with_env_keys_and_refuses_bad_ones(
    tmp_path: Path,
    temporal_server: EmbeddedServer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    env = {
        "OPENFLOW_HOME": str(tmp_path),
        "OPENFLOW_TEMPORAL_ADDRESS": temporal_server.address,
        "OPENFLOW_NAMESPACE": temporal_server.namespace,
    }
    port = free_port()
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "openflow.cli",
        "api",
        "--host",
        "0.0.0.0",
        "--port",
        str(port),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        env=cli_env({**env, "OPENFLOW_API_KEYS": f"{SECRET}=ops"}),
    )
    try:
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        open_bind = ["api", "--host", "0.0.0.0", "--port", str(free_port())]
        monkeypatch.setenv("OPENFLOW_API_KEYS", SECRET)
        bad = await in_process(capsys, *open_bind)
        assert_one_line_error(bad, "OPENFLOW_API_KEYS", "not KEY=TENANT")
        assert SECRET not in bad.stderr
        monkeypatch.delenv("OPENFLOW_API_KEYS")
        assert_one_line_error(await in_process(capsys, *open_bind), "set OPENFLOW_API_KEYS")

        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            health = await _poll_health(http, process)
            assert health["status"] == "ok"
            assert (await http.get("/workflows")).status_code == 401
            allowed = await http.get("/workflows", headers={"Authorization": f"Bearer {SECRET}"})
            assert allowed.status_code == 200
    finally:
        process.terminate()
        _, err = await asyncio.wait_for(process.communicate(), 30)
    assert SECRET not in err.decode()


async def _poll_health(http: httpx.AsyncClient, process: asyncio.subprocess.Process) -> dict:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 60
    while loop.time() < deadline:
        assert process.returncode is None, "the API exited"
        try:
            response = await http.get("/health")
            if response.status_code == 200:
                return dict(response.json())
        except httpx.TransportError:
            pass
        await asyncio.sleep(0.1)
    raise AssertionError("the API did not answer /health within 60s")
