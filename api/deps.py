"""Shared dependencies of the routes, as ``Annotated`` aliases.

They are ``async`` so FastAPI calls them inline instead of hopping to a worker thread.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from api.friends import FriendsReader
from api.live import LiveReader
from api.segments import GenerationRegistry
from conf.boards import BoardsConfig
from conf.settings import Settings
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


SettingsDep = Annotated[Settings, Depends(get_settings)]
BoardsDep = Annotated[BoardsConfig, Depends(get_boards)]
SpeedDep = Annotated[SpeedLayer, Depends(get_speed)]
GenerationsDep = Annotated[GenerationRegistry, Depends(get_generations)]
LiveDep = Annotated[LiveReader, Depends(get_live)]
FriendsDep = Annotated[FriendsReader, Depends(get_friends)]
