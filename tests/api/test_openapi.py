"""/openapi.json documents every endpoint: request and response schemas and its error
responses; the documented models describe the real answers."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from api.models import (
    BoardsOut,
    EntriesOut,
    EventResultOut,
    NearbyOut,
    RankOut,
    StatusOut,
    TopOut,
)
from tests.conftest import SignedClient, event
from tests.support.segments import write_generation

pytestmark = pytest.mark.integration
BOARD = "season:S4:global"
APPROX = {"mode": "approx"}
SNAPSHOT = {"mode": "snapshot"}


def _schema_of(response: dict[str, Any]) -> dict[str, Any] | None:
    for content in response.get("content", {}).values():
        schema = content.get("schema")
        if schema:
            return schema  # type: ignore[no-any-return]
    return None


def test_every_operation_documents_request_response_and_errors(
    api: SignedClient,
) -> None:
    doc = api.get("/openapi.json").json()
    problems: list[str] = []
    operations = 0
    for path, item in doc["paths"].items():
        for method, op in item.items():
            operations += 1
            name = f"{method.upper()} {path}"
            responses = op.get("responses", {})
            ok = [r for code, r in responses.items() if code.startswith("2")]
            if not ok or any(_schema_of(r) is None for r in ok):
                problems.append(f"{name}: no response schema")
            takes_input = bool(op.get("parameters")) or method in ("post", "put")
            errors = {c: r for c, r in responses.items() if c[0] in "45"}
            if takes_input and not errors:
                problems.append(f"{name}: no error responses")
            for code, response in errors.items():
                if _schema_of(response) is None:
                    problems.append(f"{name}: error {code} without a schema")
            if method in ("post", "put"):
                body = op.get("requestBody", {})
                if _schema_of(body) is None:
                    problems.append(f"{name}: no request schema")
    assert operations >= 19
    assert not problems, "\n".join(problems)


def test_the_models_describe_the_answers(api: SignedClient, settings: Any) -> None:
    write_generation(settings.segments_dir, 1, {BOARD: {"a": 3, "b": 2}})
    posted = api.post("/v1/score-events", event(playerId="P2"))
    checks: list[tuple[type[BaseModel], Any]] = [
        (EventResultOut, posted),
        (StatusOut, api.get("/healthz")),
        (StatusOut, api.get("/readyz")),
        (BoardsOut, api.get("/v1/boards")),
        (TopOut, api.get(f"/v1/boards/{BOARD}/top")),
        (TopOut, api.get(f"/v1/boards/{BOARD}/top", params={"mode": "snapshot"})),
        (RankOut, api.get(f"/v1/boards/{BOARD}/players/P2")),
        (RankOut, api.get(f"/v1/boards/{BOARD}/players/P2", params=APPROX)),
        (RankOut, api.get(f"/v1/boards/{BOARD}/players/a", params=SNAPSHOT)),
        (NearbyOut, api.get(f"/v1/boards/{BOARD}/players/P2/nearby")),
        (EntriesOut, api.get(f"/v1/boards/{BOARD}/entries")),
    ]
    for model, reply in checks:
        assert reply.status_code == 200, reply.text
        assert reply.headers["content-type"] == "application/json"
        parsed = model.model_validate(reply.json())
        # Every documented field the answer has, the model read (no silent extras
        # standing in for a misspelt documented field).
        assert not (parsed.model_extra or {}), (model.__name__, parsed.model_extra)


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        for value in node.values():
            found.extend(_refs(value))
        return found
    if isinstance(node, list):
        return [ref for item in node for ref in _refs(item)]
    return []


def _resolve(doc: dict[str, Any], ref: str) -> Any:
    assert ref.startswith("#/"), ref
    node: Any = doc
    for part in ref[2:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def test_every_ref_in_the_document_resolves(api: SignedClient) -> None:
    # A dangling $ref (a body model's nested "#/$defs/..." left in place) hides the
    # body from schema-driven fuzzers: they never generate it.
    doc = api.get("/openapi.json").json()
    refs = _refs(doc)
    assert refs
    dangling = sorted({ref for ref in refs if _resolve(doc, ref) is None})
    assert not dangling, dangling
    body = doc["paths"]["/v1/score-events"]["post"]["requestBody"]
    result = body["content"]["application/json"]["schema"]["properties"]["result"]
    assert _resolve(doc, result["$ref"])["properties"]["points"]


def test_game_scoped_paths_are_documented(api: SignedClient) -> None:
    """GamePaths maps /v1/games/{gameId}/... in plain ASGI (API.md "Games"): the
    document lists GET /v1/games and a game-scoped copy of every board read and
    score-event write, with the game's path parameter and 404 game_not_found."""
    doc = api.get("/openapi.json").json()
    paths = doc["paths"]
    listed = paths["/v1/games"]["get"]["responses"]["200"]["content"]
    games = _resolve(doc, listed["application/json"]["schema"]["$ref"])
    assert games["required"] == ["games"]
    plain = [p for p in paths if p.startswith(("/v1/boards", "/v1/score-events"))]
    assert "/v1/boards/{board}/top" in plain and "/v1/score-events:batch" in plain
    for path in plain:
        scoped = paths["/v1/games/{gameId}" + path[len("/v1") :]]
        assert set(scoped) == set(paths[path]), path
        for method, op in scoped.items():
            names = [p["name"] for p in op["parameters"]]
            assert names[0] == "gameId" and names[1:] == [
                p["name"] for p in paths[path][method].get("parameters", [])
            ], (path, names)
            assert "404" in op["responses"], path
    ids = [op["operationId"] for item in paths.values() for op in item.values()]
    assert len(ids) == len(set(ids))
    # The documented answer is the real one.
    body = api.get("/v1/games").json()
    assert [g["game"] for g in body["games"]] == ["default"]
    assert set(body["games"][0]) == set(
        games["properties"]["games"]["items"]["required"]
    )
