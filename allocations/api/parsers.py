"""The API's JSON parser: ``bounded_json.loads``'s bounds on nesting and number length."""

from __future__ import annotations

import codecs
from typing import Any

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser, get_encoding
from rest_framework.utils import json

from allocations.bounded_json import loads


class BoundedJSONParser(JSONParser):
    """DRF's JSON parser with ``loads``'s bounds: a 400 ``{"detail": ...}`` for a document
    nested too deeply or holding too long a number, never a RecursionError."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        encoding = get_encoding(parser_context or {})
        try:
            text = codecs.getreader(encoding)(stream).read()
            return loads(text, parse_constant=json.strict_constant if self.strict else None)
        except ValueError as exc:  # JSONRefused, JSONDecodeError, UnicodeDecodeError
            raise ParseError(f"JSON parse error - {exc}") from exc
