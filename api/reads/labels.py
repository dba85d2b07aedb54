"""What every ranked read shares: the board check, the pinned generation, the labels."""

from __future__ import annotations

from typing import Any, Literal

from api.errors import (
    BoardNotFound,
    GenerationExpired,
    GenerationNotFound,
)
from conf.boards import BoardsConfig, board_label, describe_board
from conf.rule_state import describe_replay_board
from serving.registry import (
    Generation,
    GenerationExpiredError,
    GenerationNotFoundError,
    GenerationRegistry,
)
from speed.live import (
    Base,
)

Mode = Literal["live", "snapshot", "approx"]


# ------------------------------------------------------------------------ helpers


def is_own_read(viewer: str | None, player_id: str) -> bool:
    """A read about ``player_id`` is the player's own only with a valid player
    token naming it (``viewer``, api.deps.get_viewer); an anonymous read is public
    and must not see a shadowed player (API.md: hidden from every public answer)."""
    return viewer is not None and viewer == player_id


def check_board(config: BoardsConfig, board: str) -> dict[str, str]:
    # A replay's namespace board (season:<S>@<R>:<scope>) reads like a board.
    described = describe_board(config, board) or describe_replay_board(config, board)
    if described is None:
        raise BoardNotFound(f"no board {board!r}")
    return described


def pin(registry: GenerationRegistry, generation_id: str | None) -> Generation:
    try:
        return registry.get(generation_id)
    except GenerationExpiredError as exc:
        raise GenerationExpired(
            f"generation {exc.generation_id} is no longer retained",
            latestGeneration=exc.latest,
        ) from None
    except GenerationNotFoundError as exc:
        raise GenerationNotFound(str(exc)) from None


def snapshot_header(
    board: str, mode: Mode, generation: Generation, population: int
) -> dict[str, Any]:
    """Labels of a snapshot answer: exactly generation ``g``, as of its boundary."""
    return {
        **board_label(board),
        "mode": mode,
        "exactness": "exact",
        "basis": "snapshot",
        "errorBound": 0,
        "generation": generation.header,
        "asOf": generation.header["boundary"],
        "population": population,
    }


def live_header(
    board: str, mode: Mode, base: Base, as_of: dict[str, int], population: int
) -> dict[str, Any]:
    """Labels of a live answer: base generation merged with every event up to asOf."""
    return {
        **board_label(board),
        "mode": mode,
        "exactness": "exact",
        "basis": "live",
        "errorBound": 0,
        "generation": base.generation.header if base.generation else None,
        "asOf": as_of,
        "population": population,
    }


def public(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Live entries without the internal keyset time of first_achieved boards."""
    return [{k: v for k, v in e.items() if k != "_t"} for e in entries]


def top_percent(rank: int, population: int) -> float:
    return round(100 * rank / max(1, population), 6)
