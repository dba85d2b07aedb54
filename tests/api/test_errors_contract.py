"""Error answers: 503 says the outcome is unknown and hides the server's paths; the
OpenAPI document carries the error shape and statuses (issue 7, items 5 and 10)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.main import create_app
from conf.settings import Settings
from tests.conftest import SignedClient, event

pytestmark = pytest.mark.integration


def test_503_says_outcome_unknown_and_hides_the_socket(
    settings: Settings, tmp_path: Path
) -> None:
    socket = tmp_path / "secret-dir" / "redis.sock"
    gone = settings.model_copy(update={"redis_url": f"unix://{socket}"})
    with TestClient(create_app(gone)) as client:
        api = SignedClient(client)
        write = api.post("/v1/score-events", event())
        ready = api.get("/readyz")
        batch = api.post("/v1/score-events:batch", {"events": [event()]})
    for reply in (write, ready, batch):
        assert reply.status_code == 503, reply.text
        assert "secret-dir" not in reply.text and str(tmp_path) not in reply.text
        assert reply.json()["error"] in ("unavailable", "not_ready")
    detail = write.json()["detail"]
    assert "outcome" in detail and "unknown" in detail
    assert "redeliver" in detail and "same eventId" in detail
    assert write.headers["Retry-After"] == "1"
    # The reason survives without the path: an operator still sees what failed.
    assert "ConnectionError" in write.json()["reason"]


def test_openapi_documents_error_shape_and_statuses(api: SignedClient) -> None:
    doc = api.get("/openapi.json").json()
    schema = doc["components"]["schemas"]["ErrorOut"]
    assert set(schema["required"]) == {"error", "detail"}
    ref = {"$ref": "#/components/schemas/ErrorOut"}
    for path in ("/v1/score-events", "/v1/score-events:batch"):
        responses = doc["paths"][path]["post"]["responses"]
        for status in ("401", "409", "413", "422", "429", "503"):
            assert responses[status]["content"]["application/json"]["schema"] == ref
    top = doc["paths"]["/v1/boards/{board}/top"]["get"]["responses"]
    assert top["404"]["content"]["application/json"]["schema"] == ref
    assert top["422"]["content"]["application/json"]["schema"] == ref
