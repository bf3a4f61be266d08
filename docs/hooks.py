"""Build hooks of the documentation site (``hooks:`` in mkdocs.yml).

The docstrings are written for Python's own tools, with reStructuredText roles
(``:class:`~jsworker.Job```) that the Markdown the reference is rendered from does not know: left
alone, the role's name shows before the code. And click 8.3 gives options without a default a
sentinel, which the CLI reference would print as ``Sentinel.UNSET``.
"""

from __future__ import annotations

import re
from typing import Any

# A role as the Markdown renders it: the role's name as text, then its target as code.
_ROLE = re.compile(
    r":(?:py:)?(?:meth|class|func|attr|data|mod|exc|obj|const|ref):<code>(~?)\.?([^<]*)</code>"
)
_UNSET = "<td><code>Sentinel.UNSET</code></td>"


def _target(found: re.Match[str]) -> str:
    short, target = found[1], found[2]
    # "~" shows the last part only, as Sphinx does.
    return f"<code>{target.rsplit('.', 1)[-1] if short else target}</code>"


def on_page_content(html: str, **_: Any) -> str:
    """The rendered page with reST roles shown as their code alone, and no sentinel default."""
    return _ROLE.sub(_target, html).replace(_UNSET, "<td></td>")
