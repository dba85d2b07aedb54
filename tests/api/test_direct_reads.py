"""The hot reads are direct routes (api/direct.py): FastAPI answers them without
dependency injection, and what they answer is exactly what FastAPI's own handler
answers for the same routes -- same status, headers and bytes, for well-formed
requests (whose parameters the direct parser converts) and for everything else
(which FastAPI's validation judges) -- through the app's exception handlers."""

from __future__ import annotations

from typing import Annotated, Any

import pytest
import redis
from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.testclient import TestClient
from pydantic import AfterValidator

import api.direct
from api.direct import DirectRoute, Params
from api.main import create_app
from api.responses import EncodedResponse
from api.routes import boards as boards_routes
from api.tokens import issue_player_token
from conf.settings import Settings
from speed.partitions import Keys
from speed.rebase import rebase
from tests.api.handlers import spy_injection, without_direct_handlers
from tests.api.segment_writer import write_generation
from tests.conftest import SignedClient, event
from tests.support.shadow import flag, seed

pytestmark = pytest.mark.integration
BOARD = "season:S4:global"
SEED = {"P1": 920, "P2": 900, "P3": 900, "P4": 880, "P5": 10, "Jos\u00e9": 500}
B = f"/v1/boards/{BOARD}"

# Parameters the direct parser converts itself.
PLAIN = [
    f"{B}/top",
    f"{B}/top?limit=3",
    f"{B}/top?limit=1000&mode=snapshot",
    f"{B}/top?mode=approx&limit=2",
    f"{B}/top?generation=g1",
    f"{B}/players/P3",
    f"{B}/players/P%33",  # the path is matched decoded, as the router does
    f"{B}/players/P3?mode=snapshot",
    f"{B}/players/P3?mode=approx",
    f"{B}/players/P9?mode=approx",
    f"{B}/players/P9",
    f"{B}/players/P3?generation=g1",
    f"{B}/players/P3?generation=g7",
    f"{B}/players/P3?generation=bogus",
    f"{B}/players/P2/nearby",
    f"{B}/players/P2/nearby?radius=0",
    f"{B}/players/P2/nearby?radius=100&mode=snapshot",
    f"{B}/players/P2/nearby?mode=approx",
    f"{B}/players/P1",  # shadowed: no token is a public read (404)
    f"{B}/players/Jose\u0301",  # decomposed: NFC finds the composed id
    "/v1/boards/nope:x:y/top",
    "/v1/boards/nope:x:y/players/P1",
    f"{B}/top?limit=3&limit=4",  # the last one, as FastAPI reads it
    f"{B}/top?unknown=1",  # ignored, as FastAPI does
    f"{B}/players/P3?mode=snap%73hot",  # decoded
    f"{B}/entries?limit=2",
    # The history read (api/routes/history.py): a DirectRoute too.
    f"{B}/players/P3/history",
    f"{B}/players/P3/history?limit=1",
    f"{B}/players/P9/history",
    f"{B}/players/Jose\u0301/history",
    "/v1/boards/nope:x:y/players/P1/history",
]
# Judged by FastAPI's validation: what its parser would coerce or refuse.
JUDGED = [
    f"{B}/top?limit=0",
    f"{B}/top?limit=1001",
    f"{B}/top?limit=abc",
    f"{B}/top?limit=+5",
    f"{B}/top?limit=05",
    f"{B}/top?limit=",
    f"{B}/top?mode=exact",
    f"{B}/top?generation=" + "g" * 33,
    f"{B}/players/P2/nearby?radius=101",
    f"{B}/players/P2/nearby?radius=-1",
    f"{B}/players/P3/history?limit=0",
    f"{B}/players/P3/history?limit=101",
    f"{B}/players/P3/history?limit=+5",
]
JUDGED_STATUSES = [422, 422, 422, 200, 200, 422, 422, 422, 422, 422, 422, 422, 200]
# Decided by the router (a redirect, no route, a route with dependencies).
ROUTED = [
    f"{B}/top/",
    f"{B}/players/P2/elsewhere",
    f"{B}/players//nearby",
    "/v1/boards",
]
ODD = JUDGED + ROUTED


def load(api: SignedClient, settings: Settings, redis_client: redis.Redis) -> None:
    """A generation g1 of SEED as the base, one player changed since, P1 shadowed."""
    seed(api, SEED)
    boundary = {
        str(p): int(redis_client.get(Keys(p).position) or 0)
        for p in range(settings.partitions)
    }
    for p in range(settings.partitions):
        redis_client.set(Keys(p).landed, boundary[str(p)])
    write_generation(settings.segments_dir, 1, {BOARD: SEED}, boundary, bucket_target=2)
    registry = api.client.app.state.generations
    registry.refresh(force=True)
    assert set(rebase(redis_client, registry.by_number(1), 4).partitions.values()) == {
        "ok"
    }
    reply = api.post(
        "/v1/score-events",
        event(eventId="late", playerId="P4", matchId="late", result={"points": 50}),
    )
    assert reply.status_code == 200, reply.text
    assert flag(api, "P1", "shadow").status_code == 200


@pytest.fixture
def loaded(
    api: SignedClient, settings: Settings, redis_client: redis.Redis
) -> SignedClient:
    load(api, settings, redis_client)
    return api


def answers(
    api: SignedClient, urls: list[str], headers: dict[str, str] | None = None
) -> list[tuple[int, dict[str, str], bytes]]:
    out = []
    for url in urls:
        reply = api.client.get(url, headers=headers or {}, follow_redirects=False)
        out.append((reply.status_code, dict(reply.headers), reply.content))
    return out


def test_direct_answers_equal_fastapi_answers(
    loaded: SignedClient,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    token = issue_player_token(settings.player_token_secret, "P1")
    own = {"Authorization": f"Bearer {token}"}
    other = issue_player_token(settings.player_token_secret, "P2")
    others = {"Authorization": f"Bearer {other}"}
    bad = {"Authorization": "Bearer not-a-token"}
    own_urls = [f"{B}/players/P1", f"{B}/players/P1/nearby?radius=2"]

    def everything(api: SignedClient) -> list[tuple[int, dict[str, str], bytes]]:
        return [
            *answers(api, PLAIN + ODD),
            *answers(api, own_urls, own),
            *answers(api, own_urls, others),
            *answers(api, own_urls, bad),
        ]

    solved = spy_injection(monkeypatch)
    judged: list[str] = []
    real_validated = Params.validated

    def spy(self: Params, request: Request) -> dict[str, Any]:
        judged.append(request.url.path)
        return real_validated(self, request)

    monkeypatch.setattr(Params, "validated", spy)
    direct = everything(loaded)
    # No dependency injection but for GET /v1/boards (a route with dependencies);
    # FastAPI's validation judged the odd parameters only.
    assert solved == ["read_boards"]
    assert len(judged) == len(JUDGED), judged
    # The reference: another app on the same data, every route answered by
    # FastAPI's own handler.
    solved.clear()
    without_direct_handlers(monkeypatch)
    with TestClient(create_app(settings)) as client:
        routed = everything(SignedClient(client))
    assert len(solved) > len(PLAIN)  # the reference did solve dependencies
    urls = PLAIN + ODD + 3 * own_urls
    for url, a, b in zip(urls, direct, routed, strict=True):
        assert a == b, url
    # The cases cover answers and refusals of both kinds.
    statuses = [status for status, _, _ in direct]
    assert set(statuses) >= {200, 307, 404, 422}
    assert statuses[len(PLAIN) : len(PLAIN) + len(JUDGED)] == JUDGED_STATUSES
    # A shadowed player: only its own token sees it; another player's token or an
    # invalid one (a public read) does not.
    assert statuses[-6:] == [200, 200, 404, 404, 404, 404]


def count(text: str, route: str, status: int) -> float:
    for line in text.splitlines():
        if (
            line.startswith("lb_http_requests_total{")
            and f'route="{route}"' in line
            and f'status="{status}"' in line
        ):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_direct_reads_keep_their_route_in_the_metrics(
    loaded: SignedClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    solved = spy_injection(monkeypatch)
    top, rank = "/v1/boards/{board}/top", "/v1/boards/{board}/players/{player_id}"
    before = loaded.client.get("/metrics").text
    for _ in range(3):
        assert loaded.client.get(f"{B}/top?limit=3").status_code == 200
    assert loaded.client.get(f"{B}/players/nobody").status_code == 404
    after = loaded.client.get("/metrics").text
    assert solved == ["read_metrics", "read_metrics"]  # the reads went directly
    assert count(after, top, 200) - count(before, top, 200) == 3
    assert count(after, rank, 404) - count(before, rank, 404) == 1


def test_an_unexpected_failure_runs_the_read_once(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read that fails with a bug is a plain 500, not read a second time."""
    calls: list[str] = []

    async def broken(*args: Any, **kwargs: Any) -> Any:
        calls.append("top")
        raise RuntimeError("a bug")

    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        monkeypatch.setattr(client.app.state.reads, "top", broken)  # type: ignore[attr-defined]
        reply = client.get(f"{B}/top?limit=3")
    assert reply.status_code == 500
    assert calls == ["top"]


async def refuse() -> None:
    raise HTTPException(status_code=418, detail="a dependency ran")


def test_a_dependency_added_later_is_not_skipped(settings: Settings) -> None:
    """A dependency on a direct route, or added by the router that includes it,
    runs: the route gets FastAPI's own handler."""
    app = create_app(settings)
    app.include_router(
        boards_routes.router, prefix="/guarded", dependencies=[Depends(refuse)]
    )
    extra = APIRouter(route_class=DirectRoute)

    @extra.get("/extra/{board}")
    async def guarded(
        request: Request, board: str, _: Annotated[None, Depends(refuse)]
    ) -> EncodedResponse:
        return EncodedResponse(b"{}")

    app.include_router(extra)
    with TestClient(app) as client:
        assert client.get(f"/guarded{B}/top?limit=3").status_code == 418
        assert client.get(f"/guarded{B}/players/P1").status_code == 418
        assert client.get("/extra/x").status_code == 418
        # The app's own inclusion stays direct (and answers).
        assert client.get(f"{B}/top?limit=3").status_code == 200


def test_plain_values_are_converted_and_odd_ones_left_to_fastapi() -> None:
    routes = boards_routes.router.routes
    route = next(r for r in routes if getattr(r, "name", "") == "read_nearby")
    parser = Params.of(route.dependant)  # type: ignore[attr-defined]
    assert parser is not None
    keys = {p.key: p for p in parser.path + parser.query + parser.header}
    assert set(keys) == {
        "board",
        "player_id",
        "radius",
        "mode",
        "generation",
        "authorization",
        "ranking",
    }
    assert keys["radius"].convert("100") == 100
    assert keys["ranking"].convert("dense") == "dense"
    assert keys["player_id"].convert("Jose\u0301") == "Jos\u00e9"
    assert keys["mode"].convert("approx") == "approx"
    for param, raw in [
        ("radius", "101"),
        ("radius", "-1"),
        ("radius", "+5"),
        ("radius", "05"),
        ("radius", ""),
        ("mode", "exact"),
        ("ranking", "fancy"),
        ("generation", "g" * 33),
    ]:
        with pytest.raises(api.direct._Odd):
            keys[param].convert(raw)


def refuse_x(value: str) -> str:
    if value == "x":
        raise ValueError("not x")
    return value


def test_a_refusing_validator_is_fastapis_422_and_one_with_info_is_fastapis(
    settings: Settings,
) -> None:
    """A path parameter's AfterValidator that refuses answers FastAPI's 422 (not a
    500); one that takes pydantic's info makes the route FastAPI's to handle."""
    router = APIRouter(route_class=DirectRoute)

    @router.get("/checked/{name}")
    async def checked(
        request: Request, name: Annotated[str, AfterValidator(refuse_x)]
    ) -> EncodedResponse:
        return EncodedResponse(b'"' + name.encode() + b'"')

    @router.get("/informed/{name}")
    async def informed(
        request: Request,
        name: Annotated[str, AfterValidator(lambda value, info: value.upper())],
    ) -> EncodedResponse:
        return EncodedResponse(b'"' + name.encode() + b'"')

    routes = {r.name: r for r in router.routes}  # type: ignore[attr-defined]
    assert Params.of(routes["checked"].dependant) is not None
    assert Params.of(routes["informed"].dependant) is None
    app = create_app(settings)
    app.include_router(router)
    with TestClient(app) as client:
        assert client.get("/checked/y").json() == "y"
        refused = client.get("/checked/x")
        assert refused.status_code == 422
        assert refused.json()["error"] == "invalid_request"
        assert client.get("/informed/y").json() == "Y"


def test_the_plain_query_reads_as_starlettes() -> None:
    from starlette.datastructures import QueryParams

    for raw in [
        b"",
        b"limit=3",
        b"limit=3&limit=4",
        b"limit=&mode=live",
        b"a&b=&=c&&d=1=2",
        b"mode=approx&generation=g1&radius=7",
    ]:
        plain = api.direct._plain_query(raw)
        assert plain is not None
        starlette = QueryParams(raw)
        assert plain == {name: starlette[name] for name in starlette}, raw
    for raw in [b"mode=snap%73hot", b"limit=+5", "n=\u00e9".encode()]:
        assert api.direct._plain_query(raw) is None
