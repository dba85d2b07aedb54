"""Each Lua script names only the KEYS/ARGV offsets that speed/scripts.py declares;
the offset tables themselves are generated from it (speed.scripts.source)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from speed.lua import load
from speed.scripts import INTERFACES, ScriptArgumentError, ScriptInterface, source

pytestmark = pytest.mark.unit

LUA_DIR = Path(__file__).resolve().parents[2] / "speed" / "lua"
TABLE = re.compile(r"^local ([A-Z][A-Z_]*) = \{(.*?)\}", re.M | re.S)
REST = re.compile(r"^local ARG_REST = (\d+)$", re.M)
FORMAT = re.compile(r'^local ([A-Z][A-Z_]*_FORMAT) = "([^"]*)"', re.M)
ENTRY = re.compile(r"(\w+)\s*=\s*(\d+)")
# A use of a generated table's entry (KEY.log, EV_BOARD.points, ...), or of a
# generated name at all (ARG_REST, EV_FORMAT).
USE = re.compile(r"\b([A-Z][A-Z_]*)\.([A-Za-z_]\w*)")
BARE = re.compile(r"(?:KEYS|ARGV)\[\s*\d")
NAME = re.compile(r"\b(KEY|KEY_GROUP|ARG|ARG_GROUP|ARG_REST|[A-Z][A-Z_]*_FORMAT)\b")


def uncommented(code: str) -> str:
    return "\n".join(line.split("--", 1)[0] for line in code.splitlines())


def code_of(name: str) -> str:
    """The script as Redis runs it (generated tables first), without its comments."""
    return uncommented(source(INTERFACES[name]))


def own_code_of(name: str) -> str:
    """The file and its fragments alone: what a person writes."""
    return uncommented(load(name))


def undeclared(iface: ScriptInterface, code: str) -> set[str]:
    """Generated names the code uses that its interface does not generate."""
    tables = iface.lua_tables()
    names = set(tables) | set(iface.lua_formats())
    if iface.argv_rest is not None:
        names.add("ARG_REST")
    bad = {n for n in NAME.findall(code) if n not in names}
    for table, entry in USE.findall(code):
        if table in tables and entry not in tables[table]:
            bad.add(f"{table}.{entry}")
        elif table not in tables and (
            table in {"KEY", "KEY_GROUP", "ARG", "ARG_GROUP"}
        ):
            bad.add(table)
    return bad


def lua_tables(code: str) -> dict[str, dict[str, int]]:
    return {
        table: {k: int(v) for k, v in ENTRY.findall(body)}
        for table, body in TABLE.findall(code)
    }


def test_every_script_is_declared() -> None:
    assert {p.stem for p in LUA_DIR.glob("*.lua")} == set(INTERFACES)


@pytest.mark.parametrize("name", sorted(INTERFACES))
def test_lua_offsets_match_declaration(name: str) -> None:
    iface = INTERFACES[name]
    code = code_of(name)
    assert lua_tables(code) == iface.lua_tables()
    assert dict(FORMAT.findall(code)) == iface.lua_formats()
    rest = REST.findall(code)
    if iface.argv_rest is None:
        assert rest == []
    else:
        assert rest == [str(len(iface.argv) + 1)]


@pytest.mark.parametrize("name", sorted(INTERFACES))
def test_no_hand_kept_offsets(name: str) -> None:
    """The tables come from speed/scripts.py alone: a .lua declaring its own would
    shadow them and drift."""
    own = own_code_of(name)
    assert lua_tables(own) == {}
    assert FORMAT.findall(own) == []
    assert REST.findall(own) == []


@pytest.mark.parametrize("name", sorted(INTERFACES))
def test_script_names_only_declared_offsets(name: str) -> None:
    """A name the interface does not declare would be nil in Lua, silently."""
    assert undeclared(INTERFACES[name], own_code_of(name)) == set()


def test_undeclared_names_are_caught() -> None:
    iface = ScriptInterface(name="t", keys=("a",), records=(("R", ("n:i64",)),))
    assert undeclared(iface, "redis.call('GET', KEYS[KEY.a]) R.n") == set()
    code = "KEYS[KEY.b] ARGV[ARG.x] ARGV[ARG_REST] R.m R_FORMAT S_FORMAT"
    assert undeclared(iface, code) == {
        "KEY.b",
        "ARG",
        "ARG_REST",
        "R.m",
        "S_FORMAT",
    }


@pytest.mark.parametrize("name", sorted(INTERFACES))
def test_no_bare_numeric_offsets(name: str) -> None:
    """Offsets are named, so a layout change has one place to be made."""
    assert BARE.findall(code_of(name)) == []


def test_bare_numeric_offsets_are_caught() -> None:
    for code in ("KEYS[1]", "ARGV[ 2]", "KEYS[KEY.a] .. ARGV[3 + n]"):
        assert BARE.findall(uncommented(code)) != []


@pytest.mark.parametrize("name", sorted(INTERFACES))
def test_status_replies_match_declaration(name: str) -> None:
    iface = INTERFACES[name]
    # {"kind", payload} as the whole reply, or "kind", payload per item.
    kinds = set(re.findall(r'return \{?"(\w+)",', code_of(name)))
    assert kinds == set(iface.statuses)
    # A script answers with a status pair or with positional fields, or both
    # ways when it declares both: the live counts answer with their groups'
    # fields, or with {"moved", total} alone when the caller guessed another
    # total (nothing counted, speed/scripts.py LIVE_COUNTS).
    assert iface.statuses or iface.fields
    if iface.statuses and iface.fields:
        assert iface.statuses == ("moved",)


def test_named_values_are_ordered_as_declared() -> None:
    iface = ScriptInterface(
        name="t", keys=("a", "b"), key_group=("x", "y"), argv=("n",), argv_rest="r"
    )
    keys = iface.keys_of({"b": 2, "a": 1}, [{"y": 4, "x": 3}, {"x": 5, "y": 6}])
    assert keys == [1, 2, 3, 4, 5, 6]
    assert iface.args_of({"n": 7}, rest=[8, 9]) == [7, 8, 9]
    with pytest.raises(ScriptArgumentError, match="missing"):
        iface.keys_of({"a": 1})
    with pytest.raises(ScriptArgumentError, match="unknown"):
        iface.args_of({"n": 1, "m": 2})


def test_packed_records_declare_types_once() -> None:
    iface = ScriptInterface(
        name="t", records=(("R", ("n:i64", "k:u16", "s:bytes", "t:bytes")),)
    )
    assert iface.lua_tables() == {"R": {"size": 4, "n": 0, "k": 1, "s": 2, "t": 3}}
    assert iface.lua_formats() == {"R_FORMAT": "i8HI4c0I4c0"}
    packed = iface.packer("R").pack((-2, 7), (b"ab", b""))
    assert packed == (
        (-2).to_bytes(8, "little", signed=True)
        + (7).to_bytes(2, "little")
        + b"\x02\x00\x00\x00ab"
        + b"\x00\x00\x00\x00"
    )
    # A number after a string could not be packed with one struct.
    bad = ScriptInterface(name="b", records=(("R", ("s:bytes", "n:i64")),))
    with pytest.raises(ScriptArgumentError, match="precede"):
        bad.lua_formats()
    with pytest.raises(ScriptArgumentError, match="not packed"):
        ScriptInterface(name="c", records=(("R", ("a", "b:u8")),)).packer("R")
