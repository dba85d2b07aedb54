"""Admin authentication: LB_ADMIN_KEYS signs /v1/admin/*, game-server keys get 403."""

from __future__ import annotations

import orjson
import pytest
from fastapi import APIRouter, FastAPI
from fastapi.testclient import TestClient

from api.deps import AdminDep
from api.errors import Forbidden, Unauthorized, install_error_handlers
from api.security import sign, verify_admin
from conf.settings import Settings
from tests.conftest import SignedClient, event

ADMIN = {"ops1": b"admin-secret"}
GAME = {"dev": b"dev-secret"}


@pytest.mark.unit
def test_verify_admin_outcomes() -> None:
    body = b"{}"
    ok = sign(b"admin-secret", body, 1000)
    assert verify_admin(ADMIN, GAME, "ops1", ok, body, 300, now=1000) == "ops1"
    with pytest.raises(Forbidden):
        verify_admin(
            ADMIN, GAME, "dev", sign(b"dev-secret", body, 1000), body, 300, now=1000
        )
    # A game-server key id with a wrong signature is not authenticated at all.
    with pytest.raises(Unauthorized):
        verify_admin(ADMIN, GAME, "dev", sign(b"nope", body, 1000), body, 300, now=1000)
    with pytest.raises(Unauthorized):
        verify_admin(
            ADMIN, GAME, "ops1", sign(b"nope", body, 1000), body, 300, now=1000
        )
    with pytest.raises(Unauthorized):
        verify_admin(ADMIN, GAME, None, None, body, 300, now=1000)
    with pytest.raises(Unauthorized, match="window"):
        verify_admin(ADMIN, GAME, "ops1", ok, body, 300, now=1301)


@pytest.mark.unit
def test_admin_keys_setting() -> None:
    settings = Settings(admin_keys="a1:s1,a2:s2")
    assert settings.admin_signing_keys == {"a1": b"s1", "a2": b"s2"}
    with pytest.raises(ValueError, match="LB_ADMIN_KEYS"):
        Settings(admin_keys="nosecret")
    with pytest.raises(ValueError, match="share key ids: dev"):
        Settings(admin_keys="dev:x")
    # Refused at start-up, not at the first admin call.
    with pytest.raises(ValueError, match="development admin key"):
        Settings(production=True, hmac_keys="k:s")


def _probe_app() -> FastAPI:
    """A route behind AdminDep that echoes who called and what body it got."""
    app = FastAPI()
    app.state.settings = Settings(admin_keys="ops1:admin-secret")
    install_error_handlers(app)
    router = APIRouter()

    @router.post("/v1/admin/probe")
    async def probe(admin: AdminDep) -> dict[str, object]:
        return {"actor": admin.actor, "body": orjson.loads(admin.body)}

    @router.get("/v1/admin/probe")
    async def probe_get(admin: AdminDep) -> dict[str, object]:
        return {"actor": admin.actor}

    app.include_router(router)
    return app


@pytest.mark.unit
def test_admin_dependency_over_http() -> None:
    with TestClient(_probe_app()) as client:
        admin = SignedClient(client, "ops1", b"admin-secret")
        game = SignedClient(client, "dev", b"dev-secret")
        reply = admin.post("/v1/admin/probe", {"reason": "x"})
        assert reply.status_code == 200
        assert reply.json() == {"actor": "ops1", "body": {"reason": "x"}}
        # GET signs the empty body.
        signed = {"X-Key-Id": "ops1", "X-Signature": sign(b"admin-secret", b"")}
        assert client.get("/v1/admin/probe", headers=signed).json() == {"actor": "ops1"}
        forbidden = game.post("/v1/admin/probe", {"reason": "x"})
        assert forbidden.status_code == 403
        assert forbidden.json()["error"] == "forbidden"
        unsigned = client.post("/v1/admin/probe", content=b"{}")
        assert unsigned.status_code == 401
        assert unsigned.json()["error"] == "unauthorized"
        wrong = SignedClient(client, "ops1", b"wrong").post("/v1/admin/probe", {})
        assert wrong.status_code == 401


@pytest.mark.integration
def test_admin_key_cannot_write_scores(api: SignedClient) -> None:
    admin = SignedClient(api.client, "admin", b"dev-admin-secret")
    reply = admin.post("/v1/score-events", event())
    assert reply.status_code == 401
    assert reply.json()["error"] == "unauthorized"
