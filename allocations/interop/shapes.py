"""Check a SageMaker request against the service model that ships inside botocore, offline.

``botocore.validate.ParamValidator`` checks required and unknown members, types and minimums;
it does not check maximums, enums or patterns, so ``check_request`` also walks the same model's
shapes for those. Every problem names the JSON path of the bad value, e.g.
``ComputeQuotaConfig.ResourceSharingConfig.Strategy: 'Borrow' is not one of Lend, DontLend,
LendAndBorrow``.
"""

from __future__ import annotations

import re
import sys
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any

import botocore.session
from botocore.model import ListShape, MapShape, OperationModel, ServiceModel, Shape, StructureShape
from botocore.validate import ParamValidator

SERVICE = "sagemaker"


@dataclass(frozen=True, slots=True)
class Problem:
    """One bad value: where it is (a JSON path) and what is wrong with it."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path or '(document)'}: {self.message}"


def join_path(prefix: str, path: str) -> str:
    """``prefix`` and a path below it: ``ComputeQuotas[2]`` + ``Name`` -> ``ComputeQuotas[2].Name``."""
    if not prefix:
        return path
    if not path:
        return prefix
    return prefix + path if path.startswith("[") else f"{prefix}.{path}"


@cache
def service_model() -> ServiceModel:
    """SageMaker's model from botocore's data files (no credentials, no network)."""
    return botocore.session.get_session().get_service_model(SERVICE)


def operation(name: str) -> OperationModel:
    return service_model().operation_model(name)


def input_shape(operation_name: str) -> StructureShape:
    shape = operation(operation_name).input_shape
    assert isinstance(shape, StructureShape)
    return shape


def shape_at(operation_name: str, *members: str) -> Shape:
    """The shape reached from an operation's input by member names ("[]" steps into a list)."""
    shape: Shape = input_shape(operation_name)
    for member in members:
        if member == "[]":
            assert isinstance(shape, ListShape)
            shape = shape.member
        else:
            assert isinstance(shape, StructureShape)
            shape = shape.members[member]
    return shape


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


# --- botocore's own checks ---------------------------------------------------------------------
def _botocore_problems(params: Any, shape: StructureShape) -> Iterator[Problem]:
    """ParamValidator's findings with their paths. botocore only offers them as one text
    report; its ``_errors`` list keeps (reason, path, details), which gives each its path."""
    report = ParamValidator().validate(params, shape)
    for reason, name, details in report._errors:
        path = name[1:] if name.startswith(".") else name
        if reason == "missing required field":
            yield Problem(join_path(path, details["required_name"]), "is required")
        elif reason == "unknown field":
            known = ", ".join(details["valid_names"])
            yield Problem(
                join_path(path, details["unknown_param"]), f"is not a known member (known: {known})"
            )
        elif reason == "invalid type":
            wanted = ", ".join(t.replace("<class '", "").replace("'>", "") for t in details["valid_types"])
            yield Problem(path, f"{_show(details['param'])} has the wrong type (expected {wanted})")
        elif reason == "invalid range":
            yield Problem(path, f"{_show(details['param'])} is below the minimum {details['min_allowed']}")
        elif reason == "invalid length":
            yield Problem(path, f"length {details['param']} is below the minimum {details['min_allowed']}")
        else:
            yield Problem(path, reason)


# --- What ParamValidator leaves out: maximums, enums, patterns ---------------------------------
def _category_ranges(category: str) -> str:
    """A regex character-class body matching the Unicode general category ``category``
    (one letter such as ``L``, or two such as ``Lu``)."""
    ranges = _all_category_ranges().get(category)
    if ranges is None:
        raise ValueError(f"unknown Unicode category \\p{{{category}}} in a model pattern")
    return ranges


@cache
def _all_category_ranges() -> dict[str, str]:
    """Every major and minor general category as character-class ranges, built once: Python's
    ``re`` has no ``\\p{...}``, which SageMaker's patterns use."""
    runs: dict[str, list[list[int]]] = {}
    for code in range(sys.maxunicode + 1):
        minor = unicodedata.category(chr(code))
        for key in (minor, minor[0]):
            ranges = runs.setdefault(key, [])
            if ranges and ranges[-1][1] == code - 1:
                ranges[-1][1] = code
            else:
                ranges.append([code, code])
    return {
        key: "".join(f"\\U{lo:08x}" if lo == hi else f"\\U{lo:08x}-\\U{hi:08x}" for lo, hi in ranges)
        for key, ranges in runs.items()
    }


_UNICODE_PROPERTY = re.compile(r"\\p\{([A-Za-z]{1,2})\}")


@cache
def compiled_pattern(pattern: str) -> re.Pattern[str]:
    """A model pattern as a Python regex (``\\p{L}`` and friends become explicit ranges).
    Patterns are matched against the whole value, as the service does."""
    return re.compile(_bracket_bare_properties(pattern))


def _bracket_bare_properties(pattern: str) -> str:
    """Replace each ``\\p{X}``: inside a character class by its ranges, outside by ``[ranges]``."""
    out: list[str] = []
    in_class = False
    i = 0
    while i < len(pattern):
        char = pattern[i]
        match = _UNICODE_PROPERTY.match(pattern, i)
        if match:
            ranges = _category_ranges(match.group(1))
            out.append(ranges if in_class else f"[{ranges}]")
            i = match.end()
            continue
        if char == "\\" and i + 1 < len(pattern):
            out.append(pattern[i : i + 2])
            i += 2
            continue
        if char == "[" and not in_class:
            in_class = True
        elif char == "]" and in_class:
            in_class = False
        out.append(char)
        i += 1
    return "".join(out)


def _walk(value: Any, shape: Shape, path: str) -> Iterator[Problem]:
    """Maximums, enums and patterns, and integers given as booleans (Python's ``True`` is an
    ``int``, so ParamValidator takes it). Descends only where the type is right: a wrong type is
    ParamValidator's finding already."""
    meta = shape.metadata
    if isinstance(shape, StructureShape):
        if isinstance(value, dict):
            for name, member in shape.members.items():
                if name in value:
                    yield from _walk(value[name], member, join_path(path, name))
        return
    if isinstance(shape, ListShape):
        if isinstance(value, list | tuple):
            if "max" in meta and len(value) > meta["max"]:
                yield Problem(path, f"has {len(value)} items, more than the maximum {meta['max']}")
            for i, item in enumerate(value):
                yield from _walk(item, shape.member, f"{path}[{i}]")
        return
    if isinstance(shape, MapShape):
        if isinstance(value, dict):
            for key, item in value.items():
                yield from _walk(key, shape.key, f"{path}[{key!r}]")
                yield from _walk(item, shape.value, f"{path}[{key!r}]")
        return
    if shape.type_name in ("integer", "long") and isinstance(value, bool):
        yield Problem(path, f"{_show(value)} is a boolean, not a whole number")
        return
    if shape.type_name == "string" and isinstance(value, str):
        if "max" in meta and len(value) > meta["max"]:
            yield Problem(path, f"{_show(value)} is longer than {meta['max']} characters")
        enum = getattr(shape, "enum", None)
        if enum and value not in enum:
            choices = (
                ", ".join(enum) if len(enum) <= 12 else ", ".join(enum[:12]) + f", ... ({len(enum)} values)"
            )
            yield Problem(path, f"{_show(value)} is not one of {choices}")
        if "pattern" in meta and not compiled_pattern(meta["pattern"]).fullmatch(value):
            yield Problem(path, f"{_show(value)} does not match the pattern {meta['pattern']}")
    elif shape.type_name in ("integer", "long", "float", "double") and isinstance(value, int | float):
        yield from _above_maximum(value, meta, path)


def _above_maximum(value: float, meta: dict[str, Any], path: str) -> Iterator[Problem]:
    if "max" in meta and value > meta["max"]:
        yield Problem(path, f"{_show(value)} is above the maximum {meta['max']}")


def check_request(operation_name: str, params: Any, prefix: str = "") -> list[Problem]:
    """Every problem of ``params`` as the input of ``operation_name``, paths under ``prefix``."""
    shape = input_shape(operation_name)
    problems = list(_botocore_problems(params, shape))
    problems.extend(_walk(params, shape, ""))
    return [Problem(join_path(prefix, p.path), p.message) for p in problems]
