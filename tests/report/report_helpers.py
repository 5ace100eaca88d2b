"""Helpers of the report tests: paths of the scenarios they run, the offline-page check."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
E20 = str(ROOT / "workloads" / "seed_chunked_prefill.yaml")
SWARM = str(ROOT / "workloads" / "agent_swarm.yaml")


def external_urls(text: str) -> list[str]:
    """Every URI of a page but its own data: images, and every tag that loads something
    (none allowed in an offline page)."""
    text = re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]+", "data:", text)
    found = re.findall(r"(?i)(?:https?:|ftp:|file:)?//[^\s\"'<>]+", text)
    found += re.findall(r"(?i)<(?:script|link|iframe|object|embed)\b", text)
    found += re.findall(r"(?i)(?:src|href)\s*=\s*[\"'](?!data:)", text)
    found += re.findall(r"(?i)url\(", text)
    return found
