"""Routes FastAPI dispatches without dependency injection: the hot reads and writes.

Profiles of the read and ingest benchmarks (bench/RESULTS.md, issue 13 and "Ingest:
the API's CPU per event") showed FastAPI's per-request machinery -- dependency
solving and per-parameter validation -- costing as much as the read or the write
itself. A :class:`DirectRoute` is an ordinary ``APIRoute`` (matched by the router,
documented in /openapi.json from its endpoint's signature, its exceptions answered by
the app's exception handlers) whose handler skips ``solve_dependencies``: it reads
the endpoint's declared path, query and header parameters with one parser,
:class:`Params`, and calls the endpoint with them and the ``Request``.

:class:`Params` converts a plain value itself -- a canonical decimal within the
declared bounds, a member of a ``Literal``, a string within its length, a string
through its ``AfterValidator`` functions -- and hands anything else (a missing required
value, ``+5``, ``05``, an empty or over-long value) to FastAPI's own validation, so
every 422 is FastAPI's, byte for byte.

:func:`add_first` makes a router's routes the app's own, ahead of the others:
``include_router`` matches through a per-inclusion layer, which cost about a third
of a cached read's CPU; a route of the app itself is one regular expression.

A route this cannot serve exactly gets FastAPI's own handler, so nothing is skipped:
an endpoint (or an including router) with a dependency, a body, a cookie, a
parameter of another shape, or an endpoint not declared to return a ``Response``.
Endpoints read the app's state from ``request.app.state``.
"""

from __future__ import annotations

import inspect
import re
import typing
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from types import NoneType, UnionType
from typing import Any, Literal, Union, get_args, get_origin

import annotated_types
import fastapi.routing
from fastapi import FastAPI
from fastapi._compat import ModelField
from fastapi.dependencies.models import Dependant
from fastapi.dependencies.utils import request_params_to_args
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute, APIRouter
from pydantic import AfterValidator
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import request_response

Handler = Callable[[Request], Coroutine[Any, Any, Response]]
# Canonical decimals only; "+5", " 5", "05" or "5.0" are FastAPI's to judge.
_DECIMAL = re.compile(r"(?:0|[1-9][0-9]{0,17})")


class _Odd(Exception):
    """A value :class:`Params` does not convert itself: FastAPI validates it."""


Convert = Callable[[str], Any]


def _bounds(metadata: list[Any]) -> tuple[int | None, int | None] | None:
    low = high = None
    for item in metadata:
        if isinstance(item, annotated_types.Ge):
            low = int(item.ge)  # type: ignore[call-overload]
        elif isinstance(item, annotated_types.Le):
            high = int(item.le)  # type: ignore[call-overload]
        else:
            return None
    return low, high


def _integer(metadata: list[Any]) -> Convert | None:
    bounds = _bounds(metadata)
    if bounds is None:
        return None
    low, high = bounds

    def convert(raw: str) -> int:
        if not _DECIMAL.fullmatch(raw):
            raise _Odd
        number = int(raw)
        if (low is not None and number < low) or (high is not None and number > high):
            raise _Odd
        return number

    return convert


def _text(metadata: list[Any]) -> Convert | None:
    longest: int | None = None
    after: list[Callable[[str], str]] = []
    for item in metadata:
        if isinstance(item, annotated_types.MaxLen) and not after:
            longest = item.max_length
        elif isinstance(item, AfterValidator) and _plain(item.func):
            after.append(item.func)  # type: ignore[arg-type]
        else:
            return None

    def convert(raw: str) -> str:
        if longest is not None and len(raw) > longest:
            raise _Odd
        try:
            for func in after:
                raw = func(raw)
        except (ValueError, AssertionError):
            raise _Odd from None  # pydantic's refusal, in FastAPI's words
        return raw

    return convert


def _plain(func: Any) -> bool:
    """A validator called with the value alone (not pydantic's ``info`` too)."""
    try:
        parameters = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):
        return False
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return sum(1 for p in parameters if p.kind in kinds) == 1


def _member(choices: tuple[Any, ...], metadata: list[Any]) -> Convert | None:
    if metadata or not all(isinstance(choice, str) for choice in choices):
        return None
    members = frozenset(choices)

    def convert(raw: str) -> str:
        if raw not in members:
            raise _Odd
        return raw

    return convert


def _converter(annotation: Any, metadata: list[Any], default: Any) -> Convert | None:
    """How to convert a plain value of this parameter, or None for a shape
    :class:`Params` does not serve (the route then gets FastAPI's handler)."""
    if get_origin(annotation) in (Union, UnionType):
        args = [arg for arg in get_args(annotation) if arg is not NoneType]
        if len(args) != 1 or default is not None:
            return None
        annotation = args[0]
    if annotation is int:
        return _integer(metadata)
    if annotation is str:
        return _text(metadata)
    if get_origin(annotation) is Literal:
        return _member(get_args(annotation), metadata)
    return None


@dataclass(frozen=True, slots=True)
class _Param:
    name: str  # the endpoint's argument
    key: str  # the path parameter, query name or header
    required: bool
    default: Any
    convert: Convert


def _param(field: ModelField, header: bool = False) -> _Param | None:
    info = field.field_info
    if info.validation_alias is not None or info.validate_default:
        return None
    required = info.is_required()
    convert = _converter(info.annotation, list(info.metadata), info.default)
    if convert is None:
        return None
    if not required and not isinstance(info.default, int | str | None):
        return None  # FastAPI copies a mutable default: its handler decides
    if header and "_" in field.alias:
        return None  # FastAPI may look it up as a dashed name: its handler decides
    default = None if required else info.default
    return _Param(field.name, field.alias, required, default, convert)


def _plain_query(raw: bytes) -> dict[str, str] | None:
    """The query string as Starlette's ``QueryParams`` reads it (the last value of a
    repeated name wins) when it is plain ASCII without escapes; None otherwise
    (``request.query_params`` then decodes it)."""
    if not raw:
        return {}
    if b"%" in raw or b"+" in raw or not raw.isascii():
        return None
    query: dict[str, str] = {}
    for pair in raw.decode("ascii").split("&"):
        if pair:
            name, _, value = pair.partition("=")
            query[name] = value
    return query


class Params:
    """The parser of one direct route's path, query and header parameters."""

    def __init__(
        self,
        dependant: Dependant,
        path: list[_Param],
        query: list[_Param],
        header: list[_Param],
    ) -> None:
        self.dependant = dependant
        self.path = path
        self.query = query
        self.header = header

    @classmethod
    def of(cls, dependant: Dependant) -> Params | None:
        """The parser of a dependant :class:`DirectRoute` can serve, else None."""
        if (
            dependant.dependencies
            or dependant.body_params
            or dependant.cookie_params
            or dependant.request_param_name is None
            or dependant.websocket_param_name
            or dependant.http_connection_param_name
            or dependant.response_param_name
            or dependant.background_tasks_param_name
            or dependant.security_scopes_param_name
        ):
            return None
        path = [_param(field) for field in dependant.path_params]
        query = [_param(field) for field in dependant.query_params]
        header = [_param(field, header=True) for field in dependant.header_params]
        if None in path or None in query or None in header:
            return None
        return cls(dependant, path, query, header)  # type: ignore[arg-type]

    def parse(self, request: Request) -> dict[str, Any]:
        """The endpoint's arguments; RequestValidationError as FastAPI raises it."""
        values: dict[str, Any] = {}
        query = _plain_query(request.scope.get("query_string", b""))
        try:
            for source, params_ in (
                (request.path_params, self.path),
                (request.query_params if query is None else query, self.query),
                (request.headers if self.header else {}, self.header),
            ):
                for param in params_:
                    raw = source.get(param.key)
                    if raw is None:
                        if param.required:
                            raise _Odd
                        values[param.name] = param.default
                    else:
                        values[param.name] = param.convert(raw)
        except _Odd:
            return self.validated(request)
        return values

    def validated(self, request: Request) -> dict[str, Any]:
        """FastAPI's own validation of every parameter (solve_dependencies' order)."""
        values: dict[str, Any] = {}
        errors: list[Any] = []
        for fields, received in (
            (self.dependant.path_params, request.path_params),
            (self.dependant.query_params, request.query_params),
            (self.dependant.header_params, request.headers),
        ):
            found, failed = request_params_to_args(fields, received)
            values.update(found)
            errors.extend(failed)
        if errors:
            raise RequestValidationError(errors)
        return values


def _returns_response(endpoint: Callable[..., Any]) -> bool:
    try:
        returned = typing.get_type_hints(endpoint).get("return")
    except Exception:  # noqa: BLE001 - an unresolvable hint: FastAPI's handler
        return False
    return isinstance(returned, type) and issubclass(returned, Response)


def direct_handler(dependant: Dependant) -> Handler | None:
    """The handler of a route served directly, or None for FastAPI's."""
    endpoint = dependant.call
    if not inspect.iscoroutinefunction(endpoint) or not _returns_response(endpoint):
        return None
    parser = Params.of(dependant)
    if parser is None:
        return None
    request_name = dependant.request_param_name
    assert request_name is not None

    async def handle(request: Request) -> Response:
        arguments = parser.parse(request)
        arguments[request_name] = request
        return await endpoint(**arguments)  # type: ignore[no-any-return]

    return handle


# FastAPI builds the handler of an included route with that inclusion's view of it
# (prefix, and the dependencies the including router adds) in this context variable.
_INCLUDED = getattr(fastapi.routing, "_effective_route_context_var", None)


class DirectRoute(APIRoute):
    """An APIRoute whose handler calls the endpoint without dependency injection
    when it has nothing to inject (see the module's docstring)."""

    def __init__(self, path: str, endpoint: Callable[..., Any], **kwargs: Any) -> None:
        super().__init__(path, endpoint, **kwargs)
        handler = direct_handler(self.dependant)
        if handler is not None:
            # Starlette's wrapper: FastAPI's adds the exit stacks of dependencies
            # with yield, and a direct route has none.
            self.app = request_response(handler)

    def get_route_handler(self) -> Handler:
        route: Any = self
        included = _INCLUDED.get() if _INCLUDED is not None else None
        if included is not None and included.original_route is self:
            route = included
        return direct_handler(route.dependant) or super().get_route_handler()


def add_first(app: FastAPI, *routers: APIRouter) -> None:
    """The routers' routes as the app's own routes, matched before every other.

    For routers whose routes carry everything themselves (prefix, tags, responses
    given to the ``APIRouter``): there is no inclusion to add a prefix or
    dependencies. Their paths must not overlap the other routes'.
    """
    app.router.routes[:0] = [route for router in routers for route in router.routes]
