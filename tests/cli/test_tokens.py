"""`lb token`: reader and player tokens signed with LB_PLAYER_TOKEN_KEY."""

from __future__ import annotations

import time

import jwt
import pytest

from cli import main as cli_main
from conf.settings import Settings

pytestmark = pytest.mark.unit


def _claims(out: str) -> dict[str, object]:
    raw = out.strip()
    secret = Settings().player_token_secret
    return jwt.decode(raw, secret, algorithms=["HS256"])  # type: ignore[no-any-return]


@pytest.fixture(autouse=True)
def _default_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LB_PLAYER_TOKEN_KEY", raising=False)
    monkeypatch.delenv("LB_PRODUCTION", raising=False)


def test_reader_token(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main.main(["token", "--reader", "web", "--ttl", "600"]) == 0
    claims = _claims(capsys.readouterr().out)
    assert claims["sub"] == "reader:web"
    assert 590 <= int(claims["exp"]) - time.time() <= 600  # type: ignore[call-overload]


def test_player_token(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main.main(["token", "--player", "P2"]) == 0
    assert _claims(capsys.readouterr().out)["sub"] == "P2"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["token", "--reader", "a b"], "--reader must be"),
        (["token", "--player", "reader:web"], "would be a reader token"),
        (["token", "--player", "a/b"], "only letters"),
    ],
)
def test_bad_subjects_are_refused(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli_main.main(argv) == cli_main.EXIT_CONFIG
    captured = capsys.readouterr()
    assert message in captured.err and captured.out == ""


@pytest.mark.parametrize("ttl", ["0", "x", str(400 * 24 * 3600)])
def test_a_bad_ttl_is_a_usage_error(ttl: str) -> None:
    with pytest.raises(SystemExit) as exited:
        cli_main.main(["token", "--reader", "web", "--ttl", ttl])
    assert exited.value.code == 2
