"""HTML of the pages: Jinja2 templates in ``templates/``, every value escaped."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined

TEMPLATES = Path(__file__).resolve().parent / "templates"
#: The pages' own navigation: href (relative to the app's root) and label.
NAV = (("./", "Cost report"), ("fleet", "Fleet"), ("plan", "Plan & rollouts"), ("whatif", "What-if"))


@cache
def environment() -> Environment:
    # StrictUndefined: a misspelt name in a template fails the tests instead of rendering as nothing.
    return Environment(
        loader=FileSystemLoader(TEMPLATES),
        autoescape=True,
        undefined=StrictUndefined,
        keep_trailing_newline=True,
    )


def render(
    template: str,
    *,
    title: str,
    base: str,
    active: str,
    user: str,
    facts: Mapping[str, str],
    settings_notes: list[str],
    now: datetime,
    **context: Any,
) -> str:
    """A page: ``template`` (extending base.html) with the navigation, the signed-in user, the settings that
    matter for reading it, and ``context``. ``base`` is the app's root path ending in "/" (the <base href>)."""
    return (
        environment()
        .get_template(template)
        .render(
            title=title,
            base=base,
            nav=NAV,
            active=active,
            user=user,
            facts=facts,
            settings_notes=settings_notes,
            rendered=now.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
            **context,
        )
    )
