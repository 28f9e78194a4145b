"""Generated requests over every route (schemathesis): no 5xx, every response matches the schema."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import Case, GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.api.conftest import KEY_A, KEY_B, ServedApp, bearer, set_keys

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]
EXAMPLES = {GenerationMode.POSITIVE: 14, GenerationMode.NEGATIVE: 8}


def test_generated_requests_get_no_5xx_and_match_the_schema(
    served: ServedApp, openflow_home: Path
) -> None:
    set_keys(openflow_home, {KEY_A: "fuzz-tenant", KEY_B: "other-tenant"})
    schema = schemathesis.openapi.from_url(f"{served.url}/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]  # type: ignore[union-attr]
    assert len(operations) == 29  # with the budget and grant-revoke routes
    calls = 0
    for operation in operations:
        for mode, examples in EXAMPLES.items():

            @settings(
                max_examples=examples,
                deadline=None,
                database=None,
                derandomize=True,
                phases=[Phase.explicit, Phase.generate],
                suppress_health_check=list(HealthCheck),
            )
            @given(case=operation.as_strategy(generation_mode=mode))
            def check(case: Case[Any]) -> None:
                nonlocal calls
                calls += 1
                case.call_and_validate(base_url=served.url, headers=bearer(KEY_A), checks=CHECKS)

            try:
                check()
            except Unsatisfiable:
                assert mode is GenerationMode.NEGATIVE, operation.label  # nothing to make invalid
    assert calls >= 250
