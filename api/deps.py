"""Shared dependencies of the routes, as ``Annotated`` aliases.

They are ``async`` so FastAPI calls them inline instead of hopping to a worker thread.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Header, Request
from pydantic import AfterValidator

from api.errors import BodyTooLarge, Unauthorized
from api.readers import bearer_of
from api.reads import ReadService
from api.security import verify_admin
from api.tokens import TokenVerifier
from conf.boards import BoardsConfig
from conf.settings import Settings
from serving.registry import GenerationRegistry
from speed.friends import FriendsReader
from speed.live import LiveReader
from speed.store import SpeedLayer


async def get_settings(request: Request) -> Settings:
    return request.app.state.settings  # type: ignore[no-any-return]


async def get_boards(request: Request) -> BoardsConfig:
    return request.app.state.boards  # type: ignore[no-any-return]


async def get_speed(request: Request) -> SpeedLayer:
    return request.app.state.speed  # type: ignore[no-any-return]


async def get_generations(request: Request) -> GenerationRegistry:
    return request.app.state.generations  # type: ignore[no-any-return]


async def get_live(request: Request) -> LiveReader:
    return request.app.state.live  # type: ignore[no-any-return]


async def get_friends(request: Request) -> FriendsReader:
    return request.app.state.friends  # type: ignore[no-any-return]


async def get_reads(request: Request) -> ReadService:
    return request.app.state.reads  # type: ignore[no-any-return]


AuthorizationHeader = Annotated[
    str | None,
    Header(
        description="player token (Bearer JWT), optional unless LB_READ_AUTH=token "
        "(then a player or reader token is required): a shadowed player's "
        "own reads (its token) answer as if it were present; reads with "
        "another player's token, a reader token or none do not"
    ),
]


def viewer_of(request: Request, authorization: str | None) -> str | None:
    """The player a valid player token names; None without one, and for a reader
    token (``reader:<name>`` is never a player, whatever players are called). With
    LB_READ_AUTH=token the gate verified the token already (api/readers.py). Open
    reads need no token, so an invalid or expired one reads as none (a client that
    attaches its token to every request keeps reading after it expires)."""
    bearer = bearer_of(request.scope)
    if bearer is not None:
        return bearer.player
    if not authorization:
        return None
    verifier: TokenVerifier = request.app.state.token_verifier
    try:
        return verifier.verify(authorization).player
    except Unauthorized:
        return None


@dataclass(frozen=True, slots=True)
class AdminCall:
    """A verified admin call: who made it (the admin key id) and its raw body."""

    actor: str
    body: bytes


async def read_body_limited(request: Request, limit: int) -> bytes:
    """The raw body, refusing more than ``limit`` bytes (declared or streamed)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge(f"body larger than {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(f"body larger than {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


async def require_admin(request: Request) -> AdminCall:
    """401 without a valid signature, 403 for a game-server key, else the actor."""
    settings: Settings = request.app.state.settings
    body = await read_body_limited(request, settings.max_body_bytes)
    actor = verify_admin(
        settings.admin_signing_keys,
        settings.signing_keys,
        request.headers.get("x-key-id"),
        request.headers.get("x-signature"),
        body,
        settings.signature_window_seconds,
    )
    return AdminCall(actor, body)


SettingsDep = Annotated[Settings, Depends(get_settings)]
BoardsDep = Annotated[BoardsConfig, Depends(get_boards)]
SpeedDep = Annotated[SpeedLayer, Depends(get_speed)]
GenerationsDep = Annotated[GenerationRegistry, Depends(get_generations)]
LiveDep = Annotated[LiveReader, Depends(get_live)]
FriendsDep = Annotated[FriendsReader, Depends(get_friends)]
ReadsDep = Annotated[ReadService, Depends(get_reads)]
AdminDep = Annotated[AdminCall, Depends(require_admin)]


def _nfc(value: str) -> str:
    return unicodedata.normalize("NFC", value)


# A player id in a URL path, in NFC as writes store it (speed.events.normalize_id), so
# a decomposed "José" reads the player a composed one wrote.
PlayerIdPath = Annotated[str, AfterValidator(_nfc)]
