"""`lb` explains itself: help for every command, short errors with documented codes."""

from __future__ import annotations

import argparse
import errno
import fcntl
import logging
import os
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
        production=True,
        hmac_keys="gs1:s3cret",
        admin_keys="ops1:adm1n",
        player_token_key=OWN_TOKEN_KEY,
    ).signing_keys == {"gs1": b"s3cret"}
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


OWN_TOKEN_KEY = "an-operators-own-player-token-key-0123"


@pytest.mark.unit
def test_production_refuses_the_dev_player_token_key_at_start_up(
    tmp_path: Path,
) -> None:
    """Regression (issue 23 item 9): LB_PRODUCTION=true with the default
    LB_PLAYER_TOKEN_KEY started, then every read with a bearer header, nearby and
    friends answered 500 ("the local player-token key is refused outside local
    use"). Refused at start-up now, naming the variable, by `lb up` and the API."""
    own = {"hmac_keys": "gs1:s3cret", "admin_keys": "ops1:adm1n"}
    with pytest.raises(SettingsError, match="LB_PLAYER_TOKEN_KEY"):
        load_settings(production=True, **own)
    settings = load_settings(production=True, player_token_key=OWN_TOKEN_KEY, **own)
    assert settings.player_token_secret == OWN_TOKEN_KEY.encode()
    # Local use keeps its default.
    assert load_settings(**own).player_token_secret
    env = lb_env(
        tmp_path,
        LB_PRODUCTION="true",
        LB_HMAC_KEYS="gs1:s3cret",
        LB_ADMIN_KEYS="ops1:adm1n",
    )
    done = lb("up", "--port", "1", env=env)
    assert done.returncode == cli_main.EXIT_CONFIG, done.stderr
    first = _short_error(done)[0]
    assert "LB_PLAYER_TOKEN_KEY" in first and "LB_PRODUCTION" in first
    assert "Traceback" not in done.stderr
    api = subprocess.run(
        [sys.executable, "-c", "from api.main import create_app; create_app()"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert api.returncode != 0
    assert "LB_PLAYER_TOKEN_KEY" in api.stderr


@pytest.mark.integration
def test_production_with_own_keys_answers_bearer_reads(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    """With its own keys a production API answers player reads carrying a bearer
    header (valid or not), nearby and friends without a 5xx (issue 23 item 9)."""
    from api.tokens import issue_player_token

    settings = Settings(
        production=True,
        hmac_keys="gs1:s3cret",
        admin_keys="ops1:adm1n",
        player_token_key=OWN_TOKEN_KEY,
        redis_url=redis_server.url,
        data_dir=tmp_path / "lb",
        partitions=2,
    )
    token = issue_player_token(settings.player_token_secret, "P1")
    base = "/v1/boards/alltime:all:global/players/P1"
    with TestClient(create_app(settings)) as client:
        for bearer in (f"Bearer {token}", "Bearer nope"):
            headers = {"Authorization": bearer}
            for path in ("", "/nearby", "/friends"):
                reply = client.get(base + path, headers=headers)
                assert reply.status_code < 500, (path, bearer, reply.text)
                assert reply.headers["content-type"].startswith("application/json")
        # The token was verified with the operator's key: P1 has no score yet.
        mine = {"Authorization": f"Bearer {token}"}
        own = client.get(base + "/friends", headers=mine)
        assert own.json()["error"] == "player_not_found", own.text


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


# ------------------------------------------------- environment failures (issue 23)


def _raised_while_handling(exc: BaseException, outer: BaseException) -> BaseException:
    try:
        try:
            raise exc
        except BaseException:
            raise outer  # noqa: B904 - the implicit context is the point
    except BaseException as caught:
        return caught


@pytest.mark.unit
@pytest.mark.parametrize(
    ("exc", "words"),
    [
        (
            OSError(errno.ENOSPC, "No space left on device", "/data/lb/x.parquet"),
            ("no space left", "/data/lb/x.parquet", "rerunning is safe"),
        ),
        (
            OSError(errno.EROFS, "Read-only file system", "/ro/lb/run"),
            ("read-only", "/ro/lb/run", "writable"),
        ),
        (
            PermissionError(errno.EACCES, "Permission denied", "/root/lb"),
            ("permission denied", "/root/lb", "LB_DATA_DIR"),
        ),
        (
            OSError("AF_UNIX path too long"),
            ("unix socket path is too long", "LB_DATA_DIR"),
        ),
        (
            OSError(errno.ENAMETOOLONG, "unix socket path too long", "/l/redis.sock"),
            ("path too long", "/l/redis.sock", "LB_DATA_DIR"),
        ),
        (
            # Raised by a library while it handled the disk's error.
            _raised_while_handling(
                OSError(errno.ENOSPC, "No space left on device", "/d/f"),
                RuntimeError("could not write the segment"),
            ),
            ("no space left", "/d/f"),
        ),
    ],
)
def test_environment_failures_are_not_bugs(
    exc: BaseException, words: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    failure = cli_main.explain(exc)
    assert failure is not None
    assert failure.code == cli_main.EXIT_ENVIRONMENT != cli_main.EXIT_BUG
    said = f"{failure.message} {failure.hint}".lower()
    for word in words:
        assert word.lower() in said, said
    assert f"  {cli_main.EXIT_ENVIRONMENT}  " in cli_main.EXIT_CODES
    assert cli_main._report("publish", exc, debug=False) == cli_main.EXIT_ENVIRONMENT
    assert "this is a bug" not in capsys.readouterr().err


@pytest.mark.unit
@pytest.mark.parametrize(
    "exc",
    [
        pytest.param("network", id="Py4JNetworkError"),
        pytest.param("empty", id="answer-empty"),
        pytest.param("chained", id="while-stopping-spark"),
    ],
)
def test_a_dead_spark_driver_is_not_a_bug(
    exc: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from py4j.protocol import Py4JError, Py4JNetworkError

    network = Py4JNetworkError("Error while sending or receiving")
    raised: BaseException = {
        "network": network,
        "empty": Py4JError("Answer from Java side is empty"),
        # spark.stop() in a finally block fails too once the JVM is gone.
        "chained": _raised_while_handling(network, RuntimeError("stop failed")),
    }[exc]
    failure = cli_main.explain(raised)
    assert failure is not None
    assert failure.code == cli_main.EXIT_ENVIRONMENT
    assert "Spark driver died" in failure.message
    assert failure.hint is not None
    assert "nothing half-done was published" in failure.hint
    assert "rerunning is safe" in failure.hint
    assert cli_main._report("publish", raised, debug=False) == failure.code
    err = capsys.readouterr().err
    assert "this is a bug" not in err and "unexpected error" not in err


@pytest.mark.unit
def test_a_java_exception_is_still_a_bug() -> None:
    # An error Spark raised (the JVM is alive) is not the driver dying.
    from py4j.protocol import Py4JError

    assert cli_main.explain(Py4JError("An error occurred while calling o1.x")) is None


@pytest.mark.integration
def test_lb_up_names_a_too_long_socket_path(tmp_path: Path) -> None:
    data = tmp_path / ("d" * 60) / ("e" * 60)
    env = lb_env(tmp_path, LB_DATA_DIR=str(data))
    done = lb("up", "--port", str(free_port()), env=env)
    assert done.returncode == cli_main.EXIT_ENVIRONMENT, done.stderr
    lines = _short_error(done)
    assert "path too long" in lines[0] and "redis.sock" in lines[0]
    assert "LB_DATA_DIR" in lines[1]
    assert not (data / "run" / "stack.json").exists()


@pytest.mark.integration
def test_a_killed_spark_jvm_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    # A real Spark JVM (pyspark's gateway), killed with SIGKILL, then called.
    import signal

    from pyspark.java_gateway import launch_gateway

    gateway = launch_gateway()
    try:
        assert gateway.jvm.java.lang.System.currentTimeMillis() > 0
        os.kill(gateway.proc.pid, signal.SIGKILL)
        gateway.proc.wait(timeout=30)
        with pytest.raises(Exception) as raised:  # noqa: PT011 - whatever py4j raises
            gateway.jvm.java.lang.System.currentTimeMillis()
    finally:
        if gateway.proc.poll() is None:
            gateway.proc.kill()
            gateway.proc.wait(timeout=30)
    assert cli_main._report("publish", raised.value, debug=False) == (
        cli_main.EXIT_ENVIRONMENT
    )
    err = capsys.readouterr().err
    assert "the Spark driver died" in err and "rerunning is safe" in err
    assert "this is a bug" not in err
