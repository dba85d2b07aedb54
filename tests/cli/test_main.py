"""`lb` explains itself: help for every command, short errors with documented codes."""

from __future__ import annotations

import argparse
import errno
import fcntl
import logging
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.main import create_app
from cli import main as cli_main
from conf.settings import Settings, SettingsError, load_settings
from jobs.jars import JarsMissing
from speed.server import RedisServer, free_port
from tests.support.lb import lb, lb_env


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise AssertionError("lb has no subcommands")


# ------------------------------------------------------------------------ help


@pytest.mark.unit
def test_every_command_and_option_has_help_and_examples() -> None:
    parser = cli_main.build_parser()
    commands = _subcommands(parser)
    assert {"up", "down", "publish", "demo"} <= set(commands)
    top = parser.format_help()
    for name in commands:
        assert name in top
    assert "exit codes:" in top and "examples:" in top
    for name, sub in commands.items():
        text = sub.format_help()
        assert sub.description, f"lb {name} has no description"
        assert "examples:" in text, f"lb {name} --help shows no example"
        for action in sub._actions:
            if action.option_strings:
                assert action.help, f"lb {name} {action.option_strings} has no help"


@pytest.mark.unit
def test_help_runs_without_settings(tmp_path: Path) -> None:
    # Help must work even when the environment is broken: that is when it is needed.
    done = lb("--help", env=lb_env(tmp_path, LB_PARTITIONS="zero"))
    assert done.returncode == 0
    assert "publish" in done.stdout and "exit codes:" in done.stdout


@pytest.mark.unit
def test_command_modules_register_through_the_hook(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(
        cli_main,
        "COMMAND_MODULES",
        ("tests.cli.sample_commands", "cli.no_such_module_here"),
    )
    commands = _subcommands(cli_main.build_parser())
    assert "hello" in commands
    assert "examples:" in commands["hello"].format_help()
    assert cli_main.main(["hello", "--name", "ann"]) == 0


# ---------------------------------------------------------------------- errors


def _short_error(done: subprocess.CompletedProcess[str]) -> list[str]:
    lines = done.stderr.strip().splitlines()
    assert "Traceback" not in done.stderr
    assert 1 <= len(lines) <= 2, done.stderr
    return lines


@pytest.mark.unit
def test_settings_error_names_the_variable(tmp_path: Path) -> None:
    done = lb("down", env=lb_env(tmp_path, LB_PARTITIONS="0"))
    assert done.returncode == cli_main.EXIT_CONFIG
    lines = _short_error(done)
    assert "LB_PARTITIONS" in lines[0]
    assert "partitions:" not in done.stderr  # not pydantic's field name


@pytest.mark.unit
def test_settings_errors_name_every_bad_variable() -> None:
    with pytest.raises(SettingsError) as caught:
        load_settings(partitions="abc", rate_limit="often")
    assert "LB_PARTITIONS" in str(caught.value)
    assert "LB_RATE_LIMIT" in str(caught.value)


@pytest.mark.unit
def test_broken_boards_file_is_two_lines(tmp_path: Path) -> None:
    boards = tmp_path / "boards.yaml"
    boards.write_text("seasons:\n  - id: S1\n    start: nope\n")
    done = lb("down", env=lb_env(tmp_path, LB_BOARDS_FILE=str(boards)))
    assert done.returncode == cli_main.EXIT_CONFIG
    lines = _short_error(done)
    assert "boards file" in lines[0] and "seasons.0" in lines[0]


@pytest.mark.unit
def test_production_refuses_the_dev_key_at_start_up(tmp_path: Path) -> None:
    """Regression (issue 7 item 10, issue 14): LB_PRODUCTION=true with the dev key
    used to start and then answer 500 to every write."""
    with pytest.raises(SettingsError, match="LB_HMAC_KEYS"):
        load_settings(production=True)
    with pytest.raises(SettingsError, match="LB_PRODUCTION"):
        load_settings(production=True, hmac_keys="gs1:s3cret,dev:dev-secret")
    # Own keys are fine in production.
    assert load_settings(
        production=True, hmac_keys="gs1:s3cret", admin_keys="ops1:adm1n"
    ).signing_keys == {
        "gs1": b"s3cret"
    }
    done = lb("up", "--port", "1", env=lb_env(tmp_path, LB_PRODUCTION="true"))
    assert done.returncode == cli_main.EXIT_CONFIG
    assert "LB_HMAC_KEYS" in _short_error(done)[0]
    # The API refuses too (uvicorn's factory reads the environment).
    env = lb_env(tmp_path, LB_PRODUCTION="true")
    api = subprocess.run(
        [sys.executable, "-c", "from api.main import create_app; create_app()"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert api.returncode != 0
    assert "LB_HMAC_KEYS" in api.stderr


@pytest.mark.integration
def test_dev_key_warns_once_at_api_start_up_unless_demo(
    settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    def warnings_for(s: Settings) -> list[logging.LogRecord]:
        caplog.clear()
        with (
            caplog.at_level(logging.WARNING, logger="leaderboard.api"),
            TestClient(create_app(s)) as client,
        ):
            assert client.get("/healthz").status_code == 200
        return [r for r in caplog.records if "development key" in r.getMessage()]

    assert settings.uses_dev_key
    assert len(warnings_for(settings)) == 1
    assert warnings_for(settings.model_copy(update={"demo": True})) == []
    own = settings.model_copy(update={"hmac_keys": "gs1:s3cret"})
    assert not own.uses_dev_key
    assert warnings_for(own) == []


@pytest.mark.integration
def test_publish_with_unreachable_redis_fails_fast(tmp_path: Path) -> None:
    closed = f"redis://127.0.0.1:{free_port()}/0"
    started = time.monotonic()
    done = lb("publish", env=lb_env(tmp_path, LB_REDIS_URL=closed))
    elapsed = time.monotonic() - started
    assert done.returncode == cli_main.EXIT_UNAVAILABLE, done.stderr
    lines = _short_error(done)
    assert "Redis is unreachable" in lines[0] and closed in lines[0]
    assert "LB_REDIS_URL" in done.stderr
    # Before Spark starts: a Python start-up plus a refused connection.
    assert elapsed < 30
    assert not (tmp_path / "lb" / "logs" / "spark.log").exists()

    debug = lb("--debug", "publish", env=lb_env(tmp_path, LB_REDIS_URL=closed))
    assert debug.returncode == cli_main.EXIT_UNAVAILABLE
    assert "Traceback" in debug.stderr


@pytest.mark.integration
@pytest.mark.parametrize(
    "command", [("publish",), ("replay", "--season", "S4", "--rule", "v2")]
)
def test_publish_lock_held_exits_busy(
    tmp_path: Path, redis_server: RedisServer, command: tuple[str, ...]
) -> None:
    env = lb_env(tmp_path, LB_REDIS_URL=redis_server.url)
    run = tmp_path / "lb" / "run"
    run.mkdir(parents=True)
    with open(run / "publish.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        done = lb(*command, env=env)
    assert done.returncode == cli_main.EXIT_BUSY, done.stderr
    assert "another `lb publish`" in _short_error(done)[0]


@pytest.mark.unit
@pytest.mark.parametrize(
    ("exc", "code", "words"),
    [
        (JarsMissing("Delta Lake jars missing from x: a.jar. Run ..."), 4, "make jars"),
        (OSError(errno.EADDRINUSE, "Address already in use"), 3, "--port"),
        (cli_main.PublishLocked("another `lb publish` is running"), 5, "wait"),
        (cli_main.RedisUnreachable("redis://h:1/0: refused"), 3, "lb up"),
        (SettingsError("LB_PARTITIONS: bad"), 2, "LB_PARTITIONS"),
        (KeyboardInterrupt(), 130, "interrupted"),
    ],
)
def test_expected_failures_map_to_documented_codes(
    exc: BaseException, code: int, words: str
) -> None:
    failure = cli_main.explain(exc)
    assert failure is not None
    assert failure.code == code
    assert words in f"{failure.message} {failure.hint}"
    assert f"  {code}" in cli_main.EXIT_CODES


@pytest.mark.unit
def test_unexpected_error_is_a_bug_with_a_hint(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli_main.explain(ZeroDivisionError("x")) is None
    code = cli_main._report("publish", ZeroDivisionError("x"), debug=False)
    err = capsys.readouterr().err
    assert code == cli_main.EXIT_BUG
    assert "--debug" in err and "Traceback" not in err


@pytest.mark.unit
def test_redact_hides_redis_passwords() -> None:
    assert cli_main.redact("redis://:pw@h:6379/0") == "redis://:***@h:6379/0"
    assert cli_main.redact("redis://u:pw@h/0") == "redis://u:***@h/0"
    assert cli_main.redact("unix:///tmp/r.sock") == "unix:///tmp/r.sock"
