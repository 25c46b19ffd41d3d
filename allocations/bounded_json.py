"""JSON read from requests and uploads, with bounds on what a hostile document can cost.

Python's ``json`` recurses once per level of nesting, so 1,000 opening brackets (2 KB) raise
``RecursionError``, which no caller expects; and it converts an integer of more than 4,300
digits by raising a ``ValueError`` that is not a ``JSONDecodeError``. ``loads`` refuses both
with a ``JSONRefused`` (a ``ValueError``) that says what and shows where, and the API's parser
turns it into a 400; the HyperPod import, the backend settings field and scenario files read
through it too. No document this site reads is nested more than a handful of levels.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any

MAX_DEPTH = 64
# A string or a bracket: strings are matched whole so that a "[" inside a name nests nothing.
# Possessive quantifiers keep the match linear on a long string.
_STRING_OR_BRACKET = re.compile(r'"(?:[^"\\]++|\\.)*+"|[\[{\]}]', re.S)


class JSONRefused(ValueError):
    """A document this site will not parse; the message says why and shows the value."""


def _excerpt(text: str, limit: int = 24) -> str:
    return text if len(text) <= limit else f"{text[:limit]}..."


def check_depth(text: str, *, limit: int = MAX_DEPTH) -> None:
    """Raise JSONRefused when ``text`` nests arrays or objects more than ``limit`` deep.

    A scan of the brackets outside strings, before parsing: deep nesting must be refused
    before the recursive parser sees it, not caught as a RecursionError afterwards, since
    whatever walks a document just under Python's limit would overflow instead."""
    if text.count("[") + text.count("{") <= limit:  # cannot be deeper: no scan needed
        return
    depth = 0
    for match in _STRING_OR_BRACKET.finditer(text):
        token = match.group()
        if token in ("[", "{"):
            depth += 1
            if depth > limit:
                raise JSONRefused(f"nested more than {limit} levels deep, at character {match.start()}")
        elif token in ("]", "}"):
            depth -= 1


class LongNumber(str):
    """An integer of a document too long for ``int()``, kept as its digits by
    ``loads(long_numbers=True)`` so that the caller can say where in the document it is."""

    def describe(self) -> str:
        return (
            f"a number of {len(self.lstrip('-'))} digits ({_excerpt(self)}) is longer than the "
            f"{sys.get_int_max_str_digits()} digits Python reads"
        )


def _parse_int(digits: str) -> int:
    try:
        return int(digits)
    except ValueError as exc:
        raise JSONRefused(LongNumber(digits).describe()) from exc


def _parse_int_or_keep(digits: str) -> int | LongNumber:
    try:
        return int(digits)
    except ValueError:
        return LongNumber(digits)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"Out of range float values are not JSON compliant: {name!r}")


def loads(text: str, *, limit: int = MAX_DEPTH, long_numbers: bool = False, **kwargs: Any) -> Any:
    """``json.loads`` with NaN and Infinity refused (as DRF's), bounded by ``limit`` levels of nesting
    and by Python's integer length, either a JSONRefused (a malformed document is a
    ``json.JSONDecodeError`` as before). With ``long_numbers`` an integer too long is kept as a
    LongNumber in its place instead, for a caller that names the path of each bad value."""
    check_depth(text, limit=limit)
    parse_int = _parse_int_or_keep if long_numbers else _parse_int
    kwargs.setdefault("parse_constant", _refuse_constant)
    return json.loads(text, parse_int=parse_int, **kwargs)
