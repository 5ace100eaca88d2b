"""The suite's hypothesis profiles (docs/testing.md, "Hypothesis profiles"), registered on
import; ``tests/conftest.py`` loads the one ``hypothesis_profile`` names (a module of its
own: test files import it, and every ``conftest`` is a module named ``conftest``)."""

from __future__ import annotations

import pytest
from hypothesis import settings

#: hypothesis profiles (docs/testing.md, "Hypothesis profiles"): ``ci`` draws the same
#: examples every run (``derandomize``: the examples follow from each test's own code, so a
#: stop cannot turn red at random) and prints the blob that reproduces a failure; ``dev``
#: (hypothesis' default, random examples each run) is the local default; ``explore``
#: draws ten times the examples, at random, to look for latent bugs on purpose. Chosen by
#: HYPOTHESIS_PROFILE, else ``ci`` when the environment variable CI is set (``.ci/run``
#: and CI services set it), else ``dev``. A test's own ``@settings`` overrides only what it
#: names (its ``max_examples``, its deadline) and inherits the rest from the profile.
#: Each profile is built on hypothesis' own ``default`` profile, never on the one loaded
#: at import: hypothesis loads its built-in ``ci`` profile (derandomized) when CI is set,
#: and a profile built on that would make ``dev`` derandomized too in a CI shell. ``ci``
#: has no deadline (a loaded CI machine must not fail a test on time) and no example
#: database (nothing written beside the checkout).
HYPOTHESIS_PROFILES = {
    "ci": {"derandomize": True, "print_blob": True, "deadline": None, "database": None},
    "dev": {},
    "explore": {"max_examples": 1000, "print_blob": True},
}
for _name, _options in HYPOTHESIS_PROFILES.items():
    settings.register_profile(_name, parent=settings.get_profile("default"), **_options)


def hypothesis_profile(environ: dict[str, str]) -> str:
    """The hypothesis profile a run loads (``HYPOTHESIS_PROFILES``): HYPOTHESIS_PROFILE,
    else ``ci`` where CI is set to anything but empty or ``0``/``false``, else ``dev``."""
    chosen = environ.get("HYPOTHESIS_PROFILE", "").strip()
    if chosen and chosen not in HYPOTHESIS_PROFILES:
        raise pytest.UsageError(
            f"HYPOTHESIS_PROFILE={chosen!r}: expected one of {', '.join(HYPOTHESIS_PROFILES)}"
        )
    if chosen:
        return chosen
    ci = environ.get("CI", "").strip().lower()
    return "ci" if ci not in ("", "0", "false") else "dev"


