"""`settings.schedule` checks: OpenFlow's 5-field cron and IANA time zones (blank is UTC)."""

from __future__ import annotations

import pytest

from openflow.engine.spec import Workflow
from openflow.schedules import ScheduleInvalid, cron_problem, schedule_settings


@pytest.mark.parametrize(
    "cron",
    ["0 9 * * 1-5", "*/15 * * * *", "0 0 1 jan sun", "5/10 8-18/2 1,15 1-12 0-7", "0 0 * * SAT"],
)
def test_five_field_crons_pass(cron: str) -> None:
    assert cron_problem(cron) is None


@pytest.mark.parametrize(
    ("cron", "problem"),
    [
        ("* * * *", "it has 4 fields, not 5"),
        ("0 0 * * * *", "it has 6 fields, not 5"),
        ("@daily", "it has 1 field, not 5"),
        ("60 * * * *", "the minute '60' is not in 0-59"),
        ("0 24 * * *", "the hour '24' is not in 0-23"),
        ("0 0 0 * *", "the day of month '0' is not in 1-31"),
        ("0 0 * 13 *", "the month '13' is not in 1-12"),
        ("0 0 * * 8", "the day of week '8' is not in 0-7"),
        ("0 0 * FOO *", "the month 'FOO' is not in 1-12"),
        ("*/0 * * * *", "the minute field '*/0' has a step of 0"),
        ("0 0 ? * 1", "the day of month field '?' is not a value, range, list or step"),
    ],
)
def test_other_crons_say_what_is_wrong(cron: str, problem: str) -> None:
    assert cron_problem(cron) == problem


def workflow(**schedule: object) -> Workflow:
    return Workflow.model_validate(
        {
            "id": "daily",
            "name": "Daily",
            "nodes": [],
            "edges": [],
            "settings": {"schedule": schedule},
        }
    )


def test_settings_default_to_utc_and_keep_the_entrypoint() -> None:
    settings = schedule_settings(workflow(cron="0  9 * * 1-5", entrypoint="morning"))
    assert settings is not None
    assert (settings.cron, settings.timezone, settings.enabled) == ("0 9 * * 1-5", "UTC", True)
    assert settings.entrypoint == "morning"
    plain = Workflow.model_validate({"id": "x", "name": "X", "nodes": [], "edges": []})
    assert schedule_settings(plain) is None


def test_a_bad_setting_names_the_workflow_and_the_field() -> None:
    with pytest.raises(ScheduleInvalid, match=r"^workflow 'daily': settings\.schedule\.timezone"):
        schedule_settings(workflow(cron="0 9 * * *", timezone="Moon/Tranquility"))
    with pytest.raises(ScheduleInvalid, match=r"^workflow 'daily': settings\.schedule\.cron"):
        schedule_settings(workflow(cron="0 9 * *"))
    with pytest.raises(ScheduleInvalid, match=r"settings\.schedule\.entrypoint must be a text"):
        schedule_settings(workflow(cron="0 9 * * *", entrypoint=3))
