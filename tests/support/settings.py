"""Settings for tests: boards whose windows stay open whatever the date, a
first_achieved season as open, the ``Settings`` of an in-process API, the
environment of an ``lb`` process."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from conf.settings import Settings

# Tests that must hold on a Redis Cluster too take both backends:
#   @pytest.mark.parametrize("redis_backend", BACKENDS, indirect=True)
# Every other test runs on the single server only.
BACKENDS = ["single", "cluster"]

# Most tests send events dated November 2026 (fixed dates make the expected board
# ids readable) and expect the boards to apply them whatever the wall clock says. A
# lateness (and a dedupe window) of ten years past today keeps those windows open on
# any date; closing windows are tested on their own, with windows relative to now
# (tests/jobs/test_season.py, tests/api/test_closing_windows.py).
OPEN_DAYS = (datetime.now(UTC) - datetime(2026, 1, 1, tzinfo=UTC)).days + 3650
OPEN_LATENESS = f"P{OPEN_DAYS}D"
OPEN_WINDOWS_BOARDS = (
    (Path(__file__).resolve().parents[2] / "conf" / "boards.yaml")
    .read_text()
    .replace('allowedLateness: "PT1H"', f'allowedLateness: "{OPEN_LATENESS}"')
    .replace('windowLateness: "PT1H"', f'windowLateness: "{OPEN_LATENESS}"')
)


def settings_boards(directory: Path) -> Path:
    """The default boards with windows open whatever the date, as a file."""
    path = directory / "boards.yaml"
    path.write_text(OPEN_WINDOWS_BOARDS)
    return path


def open_windows_env(directory: Path) -> dict[str, str]:
    """Environment for an `lb` process that must apply events dated November 2026
    whatever the date: the open-windows boards file and a dedupe window as long."""
    directory.mkdir(parents=True, exist_ok=True)
    return {
        "LB_BOARDS_FILE": str(settings_boards(directory)),
        "LB_DEDUPE_WINDOW": OPEN_LATENESS,
    }


def base_settings(redis_url: str, directory: Path, **overrides: object) -> Settings:
    """The tests' ``Settings``: data under ``directory/lb``, four partitions, no
    rate limit, the open-windows boards and a dedupe window as long (fixed event
    dates in tests, November 2026, must not age out of it)."""
    fields: dict[str, object] = {
        "redis_url": redis_url,
        "data_dir": directory / "lb",
        "partitions": 4,
        "rate_limit": "off",
        "boards_file": settings_boards(directory),
        "dedupe_window": timedelta(days=OPEN_DAYS),
    }
    fields.update(overrides)
    return Settings(**fields)  # type: ignore[arg-type]


# A first_achieved season (ties by who reached the score first) that stays open
# whatever today's date.
FA_BOARD = "season:FA:global"
FA_BOARDS_YAML = """\
regions: [eu, na]
seasons:
  - {id: FA, start: "2026-01-01T00:00:00Z", end: "2100-01-01T00:00:00Z",
     tieBreak: first_achieved}
"""


def first_achieved_settings(settings: Settings, directory: Path) -> Settings:
    """``settings`` with FA_BOARDS_YAML for boards (a file in ``directory``)."""
    path = directory / "fa.yaml"
    path.write_text(FA_BOARDS_YAML)
    return settings.model_copy(update={"boards_file": path})
