"""The short chaos campaign (`python -m bench.chaos --short`), one test per scenario.

Every scenario runs on the campaign's own Temporal server and worker processes, with a fixed
seed. Each must hold: nothing ran twice, nothing is stuck, nothing failed that should not,
nothing left a run's folder and no planted key shows up.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from bench.chaos import Campaign, Plan, Tally, scenarios, table

pytestmark = pytest.mark.asyncio(loop_scope="session")

SEED = 17


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def campaign() -> AsyncIterator[Campaign]:
    async with Campaign(seed=SEED) as kit:
        yield kit


async def held(campaign: Campaign, name: str) -> list[Tally]:
    tallies = await scenarios()[name](campaign, Plan.short())
    assert all(t.attempts for t in tallies), table(tallies)
    assert not any(t.failed for t in tallies), table(tallies)
    return tallies


async def test_worker_kills_repeat_nothing_and_every_run_completes(campaign: Campaign) -> None:
    await held(campaign, "worker-kill")


async def test_a_kill_in_prepare_run_moves_on_and_leaves_no_mcp_server(
    campaign: Campaign,
) -> None:
    await held(campaign, "prepare-kill")


async def test_a_server_kill_loses_no_known_outcome(campaign: Campaign) -> None:
    await held(campaign, "server-kill")


async def test_runs_stopped_and_resumed_under_load_complete_once(campaign: Campaign) -> None:
    await held(campaign, "stop-resume")


async def test_malformed_signals_updates_and_queries_harm_no_run(campaign: Campaign) -> None:
    await held(campaign, "signals")


async def test_malformed_cli_input_exits_2_in_one_line(campaign: Campaign) -> None:
    await held(campaign, "cli")


async def test_malformed_http_requests_get_a_json_4xx(campaign: Campaign) -> None:
    await held(campaign, "http")


async def test_no_path_escapes_the_run_folder(campaign: Campaign) -> None:
    await held(campaign, "escapes")


async def test_no_planted_secret_shows_anywhere(campaign: Campaign) -> None:
    """Last: it scans every run the tests above started, and their logs and responses."""
    await held(campaign, "secrets")
