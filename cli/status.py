"""`lb status`: one screen with the stack, the latest generation, backlog, seasons and
the last verify."""

from __future__ import annotations

from typing import Any

import httpx
from redis.backoff import NoBackoff
from redis.retry import Retry

from api.operations import collect_state
from cli.stack import api_url
from conf.boards import load_boards
from conf.settings import Settings
from conf.stack_state import read_stack_state, restart_counts
from serving.registry import GenerationRegistry
from speed.connection import sync_client
from speed.server import RedisNotConfigured, resolve_redis_url


def _probe_api(url: str | None) -> str:
    if url is None:
        return "not started by lb up"
    try:
        reply = httpx.get(f"{url}/readyz", timeout=2)
    except httpx.HTTPError as exc:
        return f"{url}: unreachable ({type(exc).__name__})"
    return f"{url}: {'ready' if reply.status_code == 200 else reply.status_code}"


def collect_status(settings: Settings) -> dict[str, Any]:
    supervisor = read_stack_state(settings.run_dir)
    try:
        url: str | None = resolve_redis_url(settings)
    except RedisNotConfigured:
        # No stack runs (and LB_REDIS_URL is unset): still say why it stopped.
        if supervisor is None:
            raise
        url = None
    client = (
        sync_client(
            url, socket_timeout=2, socket_connect_timeout=2, retry=Retry(NoBackoff(), 0)
        )
        if url
        else None
    )
    try:
        registry = GenerationRegistry(
            settings.segments_dir, settings.retained_generations
        )
        state = collect_state(
            settings, client, registry, load_boards(settings.boards_file)
        )
    finally:
        if client is not None:
            client.close()
    body = state.as_dict()
    body["stack"] = {
        "redis": (
            f"{url}: " + (f"DOWN ({state.redis_error})" if state.redis_error else "up")
            if url
            else "not running (no stack runs on this data dir)"
        ),
        "api": _probe_api(api_url(settings)),
        "supervisor": supervisor,
    }
    return body


def _render_supervisor(state: dict[str, Any] | None) -> list[str]:
    """The supervisor's state, restarts and their reasons (conf/stack_state.py)."""
    if state is None:
        return []
    counts = restart_counts(state)
    restarts = ", ".join(f"{name} {n}" for name, n in counts.items())
    line = f"supervisor  {state.get('state', '?')} (pid {state.get('pid', '?')})"
    limit, _, window = str(state.get("limit", "?/?")).partition("/")
    line += f", restarts: {restarts} (limit {limit} per process within {window} s)"
    lines = [line]
    if state.get("state") == "stopped":
        lines.append(
            f"            stopped at {state.get('stoppedAt', '?')}: "
            f"{state.get('stoppedReason', '?')}"
        )
    for event in (state.get("events") or [])[-5:]:
        lines.append(
            f"            {event.get('at')} {event.get('process')}: "
            f"{event.get('reason')}"
        )
    return lines


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = int(seconds)
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h{(seconds % 3600) // 60:02d}m"


def render_status(status: dict[str, Any]) -> str:
    lines = [f"status at {status['now']}", ""]
    lines += [f"redis       {status['stack']['redis']}"]
    lines += [f"api         {status['stack']['api']}"]
    lines += _render_supervisor(status["stack"].get("supervisor"))
    generation = status.get("generation")
    if generation:
        lines.append(
            f"generation  {generation['id']} published {generation['publishedAt']} "
            f"({_age(generation['ageSeconds'])} ago)"
        )
    else:
        lines.append("generation  none published yet")
    lines += [
        "",
        "partition  position  landed  backlog  oldest unlanded  after generation  base",
    ]
    for p in status["partitions"]:
        lines.append(
            f"{p['partition']:>9}  {p['position']:>8}  {p['landed']:>6}  "
            f"{p['backlog']:>7}  {_age(p['oldest_unlanded_age_seconds']):>15}  "
            f"{p['generation_lag_positions']:>16}  g{p['base_generation']}"
        )
    if not status["partitions"]:
        lines.append("(Redis unreachable: no partition state)")
    lines += ["", "season  state    closes at"]
    for season in status["seasons"]:
        lines.append(f"{season['season']:<7} {season['state']:<8} {season['closesAt']}")
    verify = status.get("last_verify")
    lines.append("")
    if verify:
        count = len(verify.get("divergences") or [])
        lines.append(
            f"last verify {verify.get('run_id')} at {verify.get('finished_at')}: "
            f"{verify.get('checked')} checked, {count} divergences"
            + (" (OK)" if count == 0 else " (FAILED)")
        )
        lines += [f"  {d}" for d in (verify.get("divergences") or [])[:10]]
    else:
        lines.append("last verify none yet")
    changed = status.get("changed_players") or {}
    if changed:
        lines += ["", "changed players since the base generation:"]
        lines += [f"  {board}: {count}" for board, count in changed.items()]
    return "\n".join(lines)
