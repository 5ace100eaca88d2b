"""Write docs/metrics.md from the declared schemas (``sim.metrics.schema``).

    python docs/gen_metrics.py          # rewrite docs/metrics.md
    python docs/gen_metrics.py --check  # exit 1 when the file is out of date

tests/report/test_schema.py fails when docs/metrics.md differs from what this writes.
"""

from __future__ import annotations

import sys
from pathlib import Path

from sim.metrics.schema import metrics_markdown

TARGET = Path(__file__).resolve().parent / "metrics.md"


def main(argv: list[str]) -> int:
    text = metrics_markdown()
    if "--check" in argv:
        same = TARGET.is_file() and TARGET.read_text(encoding="utf-8") == text
        print("docs/metrics.md is up to date" if same else "docs/metrics.md is out of date")
        return 0 if same else 1
    TARGET.write_text(text, encoding="utf-8")
    print(f"wrote {TARGET}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
