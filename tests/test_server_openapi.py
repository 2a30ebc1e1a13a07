"""The OpenAPI spec, checked by schemathesis: property-based requests (valid and invalid) against
every operation of the app, in process, on a real database under RLS.

Checks: no 5xx; every status is one the spec documents; content type and body conform to the
spec; invalid data (by the spec) is refused with a 4xx; a request without the key is refused
(``ignored_auth``). Half the note ids in paths are a stored note of the key's user, so
GET/PATCH/DELETE of a real note are exercised, not only 404s.
"""

from __future__ import annotations

import itertools
import os
from collections import Counter

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    ignored_auth,
    negative_data_rejection,
    not_a_server_error,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from cortex_pg.server.app import openapi_document
from tests.helpers.service import app, bearer, key_for, owner_engine, rls_store  # noqa: F401

# examples per operation (CORTEX_PG_SCHEMATHESIS_EXAMPLES for a longer run)
EXAMPLES = int(os.environ.get("CORTEX_PG_SCHEMATHESIS_EXAMPLES", "40"))
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    response_headers_conformance,
    negative_data_rejection,
    ignored_auth,
]
SEEN: Counter[tuple[str, int]] = Counter()  # (operation, status) -> requests, for the summary test
TURN = itertools.count()


@pytest.fixture
def seeded(rls_store, key_for):  # noqa: F811
    """A key of user ``st`` and the id of a note of theirs (with a link, so /links has one)."""
    key = key_for("st")
    first = rls_store.add("Alice works at Acme and knows Bob.", user_id="st", session_id="s1")
    second = rls_store.add("Bob likes Jazz and plays the piano.", user_id="st", session_id="s1")
    rls_store.update(first, user_id="st", links={second: {"type": "supports", "strength": 0.8}})
    return key, first


# the document the app serves at /openapi.json (a test below checks they are equal)
schema = schemathesis.openapi.from_dict(openapi_document())
# the key is the test's (a header it sends); schemathesis does not generate or mutate it, and its
# ignored_auth check sends each operation without it
schema.config.generation.update(
    modes=[GenerationMode.POSITIVE, GenerationMode.NEGATIVE],
    max_examples=EXAMPLES,
    with_security_parameters=False,
)


@schema.parametrize()
@settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
def test_every_operation_conforms_to_the_spec(case, app, seeded):  # noqa: F811
    key, note_id = seeded
    positive = case.meta is not None and not case.meta.generation.mode.is_negative
    if positive and case.path_parameters and next(TURN) % 2:
        if "id" in case.path_parameters:
            case.path_parameters["id"] = note_id
        if "name" in case.path_parameters:
            case.path_parameters["name"] = "alice"  # an entity of the seeded note (any case)
    case.operation.app = case.operation.schema.app = app  # this test's app (own database), same spec
    response = case.call_and_validate(base_url="http://testserver", headers=bearer(key), checks=CHECKS)
    SEEN[(f"{case.method} {case.path}", response.status_code)] += 1


def test_every_operation_was_exercised_and_reached_a_real_note():
    """After the property run (same process, file order): every operation answered both a 2xx and
    a 4xx at least once (so the run reached real notes and entities, not only 404s and 422s)."""
    operations = {f"{m.upper()} {p}" for p, ops in openapi_document()["paths"].items() for m in ops}
    ran = {op for op, _ in SEEN}  # also other methods on each path: the probes for 405
    if not operations <= ran:
        pytest.skip("run with the property test of every operation in this process for the summary")
    summary = ", ".join(f"{op} {st}: {n}" for (op, st), n in sorted(SEEN.items()))
    print(f"schemathesis: {sum(SEEN.values())} requests ({summary})")
    for op in operations - {"DELETE /notes/{id}"}:  # one delete per run can succeed: the seeded note's
        assert any(200 <= st < 300 for (o, st) in SEEN if o == op), (op, SEEN)
        if op != "GET /health":  # takes no input to get wrong
            assert any(400 <= st < 500 for (o, st) in SEEN if o == op), (op, SEEN)


def test_the_spec_is_served_and_names_every_route(app):  # noqa: F811
    from fastapi.testclient import TestClient

    with TestClient(app) as client:
        spec = client.get("/openapi.json").json()
    assert spec == openapi_document()
    assert set(spec["paths"]) == {
        "/notes",
        "/notes/{id}",
        "/notes/{id}/links",
        "/notes/{id}/history",
        "/search",
        "/entities",
        "/entities/{name}",
        "/entities/{name}/related",
        "/health",
    }
    assert spec["components"]["securitySchemes"]["ApiKey"] == {
        "type": "http",
        "scheme": "bearer",
        "description": spec["components"]["securitySchemes"]["ApiKey"]["description"],
    }
    # every data route names its error body for 401 and 422
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            if path != "/health":
                assert {"401", "422"} <= set(op["responses"]), (method, path)
                assert op["responses"]["422"]["content"]["application/json"]["schema"] == {
                    "$ref": "#/components/schemas/ErrorBody"
                }
