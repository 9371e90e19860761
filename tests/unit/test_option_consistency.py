"""Every subcommand's options agree (issue 43 item 5): one option name has one meaning on
every command (its action, value type, nargs, destination and help, the help compared up
to :data:`~pytimings.console.options.DETAIL`, after which a command may say what it does
with it), and one meaning has one spelling (the same destination or the same help under
different option strings is refused). The parsers are the real ones, every subcommand's
options added as ``pytimings`` adds them."""

from __future__ import annotations

import argparse
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pytest

from pytimings.cli import every_parser
from pytimings.console.options import DETAIL

Meaning = tuple[Any, ...]


def _commands(parser: argparse.ArgumentParser, path: str = "") -> Iterator[tuple[str, Any]]:
    """(command path, parser) of every subcommand, nested ones (``bench copy``) included."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                where = f"{path} {name}".strip()
                yield where, sub
                yield from _commands(sub, where)


def _options() -> list[tuple[str, argparse.Action]]:
    skip = (argparse._HelpAction, argparse._VersionAction, argparse._SubParsersAction)
    return [
        (command, action)
        for command, parser in _commands(every_parser())
        for action in parser._actions
        if action.option_strings and not isinstance(action, skip)
    ]


def _meaning(action: argparse.Action) -> Meaning:
    kind = getattr(action.type, "__name__", action.type)
    helped = (action.help or "").split(DETAIL)[0]
    return (type(action).__name__, kind, action.nargs, action.const, action.dest, helped)


def one_meaning_per_name(options: list[tuple[str, argparse.Action]]) -> list[str]:
    """The option names used with two meanings, each with where."""
    by_name: dict[str, dict[Meaning, list[str]]] = defaultdict(lambda: defaultdict(list))
    for command, action in options:
        for name in action.option_strings:
            by_name[name][_meaning(action)].append(command)
    return [
        f"{name}: " + " | ".join(f"{sorted(set(cmds))}: {m}" for m, cmds in meanings.items())
        for name, meanings in sorted(by_name.items())
        if len(meanings) > 1
    ]


def one_spelling_per_meaning(options: list[tuple[str, argparse.Action]]) -> list[str]:
    """The meanings (a destination, or a help text) spelt with different option strings."""
    spellings: dict[tuple[str, str], dict[tuple[str, ...], list[str]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for command, action in options:
        strings = tuple(sorted(action.option_strings))
        spellings["dest", action.dest][strings].append(command)
        spellings["help", (action.help or "").split(DETAIL)[0]][strings].append(command)
    return [
        f"{what} {key!r}: " + " | ".join(f"{list(s)} in {sorted(set(c))}" for s, c in seen.items())
        for (what, key), seen in sorted(spellings.items())
        if len(seen) > 1 and not _aliases(list(seen))
    ]


def _aliases(spellings: list[tuple[str, ...]]) -> bool:
    """Spellings that differ only by kept aliases: one of them holds all the others'
    strings (``record -o/--out/--output`` and ``-o/--out``)."""
    widest = max(spellings, key=len)
    return all(set(s) <= set(widest) for s in spellings)


def test_every_option_name_has_one_meaning() -> None:
    clashes = one_meaning_per_name(_options())
    assert not clashes, "\n".join(clashes)


def test_every_meaning_has_one_spelling() -> None:
    clashes = one_spelling_per_meaning(_options())
    assert not clashes, "\n".join(clashes)


def _parser(*declare: Any) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    for args, kw in declare:
        parser.add_argument(*args, **kw)
    return parser


@pytest.mark.parametrize(
    ("first", "second"),
    [  # what the command line had before issue 43
        ((("--top",), {"type": int}), (("--top",), {"type": str})),  # ops refused 'all'
        ((("-q",), {"action": "store_true", "help": "no progress bars"}),
         (("-q",), {"action": "store_true", "help": "print no table"})),
        ((("--critical-path",), {"action": "store_true"}), (("--critical-path",), {})),
    ],
)  # fmt: skip
def test_two_meanings_of_one_name_are_found(first: Any, second: Any) -> None:
    options = [("one", a) for a in _parser(first)._actions[1:]]
    options += [("two", a) for a in _parser(second)._actions[1:]]
    assert len(one_meaning_per_name(options)) == 1


def test_two_spellings_of_one_meaning_are_found() -> None:
    """``record -o/--output`` against ``loadgen --out``, same help: two spellings."""
    said = {"help": "where to write the output", "dest": "out"}
    options = [("record", a) for a in _parser((("-o", "--output"), said))._actions[1:]]
    options += [("loadgen", a) for a in _parser((("--out",), said))._actions[1:]]
    assert one_spelling_per_meaning(options)
