"""A payload or a result made readable: JSON pretty-printed, other text as it is, anything
else as a hex dump. Nothing is ever decoded by a serializer that could run code (pickle)."""

from __future__ import annotations

import json
from dataclasses import dataclass

#: The most bytes of a payload a page shows.
SHOWN = 256 * 1024


@dataclass(frozen=True, slots=True)
class Shown:
    """What a page shows of a payload: ``text`` in ``kind`` (json, text or hex), ``size`` in
    bytes, and whether it was cut to :data:`SHOWN` bytes."""

    text: str
    kind: str
    size: int
    cut: bool


def readable(body: bytes, content_type: str | None = None) -> Shown:
    """``body`` (of ``content_type``, when known) as a page shows it."""
    size, cut = len(body), len(body) > SHOWN
    part = body[:SHOWN]
    if not cut and (content_type is None or "json" in content_type):
        try:
            doc = json.loads(part)
        except (ValueError, UnicodeDecodeError):
            pass
        else:
            return Shown(json.dumps(doc, indent=2, ensure_ascii=False, sort_keys=False), "json", size, cut)
    if content_type is None or content_type.startswith("text/") or "json" in content_type:
        try:
            return Shown(part.decode(), "text", size, cut)
        except UnicodeDecodeError:
            pass
    return Shown(_hex(part[:4096]), "hex", size, cut or size > 4096)


def _hex(data: bytes) -> str:
    lines = []
    for at in range(0, len(data), 16):
        row = data[at : at + 16]
        text = "".join(chr(b) if 32 <= b < 127 else "." for b in row)
        lines.append(f"{at:08x}  {row.hex(' '):<47}  {text}")
    return "\n".join(lines)
