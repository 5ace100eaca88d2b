"""pydantic's plug-in loader, without ``importlib.metadata`` while plug-ins are off.

Responsibility: before pydantic builds its first validator it imports its plug-in loader
(``pydantic.plugin._loader``), and that module imports ``importlib.metadata`` at its top
(with it ``email``, ``zipfile``, ``csv``: ~40 ms CPU, about a tenth of ``kvsim
validate``) even when ``PYDANTIC_DISABLE_PLUGINS`` says no plug-in is wanted, which the
``kvsim`` command sets (``sim.cli.main``). ``install()`` puts a stand-in under that
module's name first: while the switch says none (``__all__``, ``1`` or ``true``, pydantic's
own test) its ``get_plugins()`` is ``()``, as pydantic's is; otherwise, and for any other
name read from it, it imports pydantic's loader (which takes its place in
``sys.modules``) and hands over to it.

Invariant: pydantic sees the plug-ins its own loader would give: none while the switch
says none, the real loader's answer otherwise (from then on the real module is the one
imported). ``install()`` does nothing once the real loader is imported. The hand-over is
one thread at a time (``_HANDOVER``): the stand-in leaves ``sys.modules`` once and the real
loader is imported once, whichever threads ask. The stand-in has a ``ModuleSpec``
(``importlib.util.find_spec`` works on it) and its ``get_plugins`` takes what pydantic
passes (nothing, today: a test pins the signature it copies).
"""

from __future__ import annotations

import importlib
import importlib.machinery
import os
import sys
import threading
import types
from typing import Any

#: the module pydantic imports its plug-ins from (``create_schema_validator``)
LOADER = "pydantic.plugin._loader"

#: the values of ``PYDANTIC_DISABLE_PLUGINS`` that mean no plug-in at all: copied from
#: pydantic 2.14.4, ``pydantic/plugin/_loader.py`` line 33, ``get_plugins``:
#: ``elif disabled_plugins in ('__all__', '1', 'true'):`` (a test reads it there)
ALL_OFF = ("__all__", "1", "true")

#: held while the stand-in hands over to the real loader (one thread at a time)
_HANDOVER = threading.Lock()


class _StandIn(types.ModuleType):
    """``pydantic.plugin._loader`` until a plug-in may be wanted."""

    def get_plugins(self, *args: Any, **kwargs: Any) -> Any:
        if os.getenv("PYDANTIC_DISABLE_PLUGINS") in ALL_OFF:
            return ()
        return _real().get_plugins(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # the import system's probes (``__path__``): a plain module
            raise AttributeError(name)
        return getattr(_real(), name)


def _real() -> types.ModuleType:
    """pydantic's own loader, imported now in the stand-in's place."""
    with _HANDOVER:  # another thread between the test and the del: a KeyError, two imports
        if isinstance(sys.modules.get(LOADER), _StandIn):
            del sys.modules[LOADER]
        # LOADER spelt out: the layer test (tests/test_layers.py) reads the module imported
        return importlib.import_module("pydantic.plugin._loader")


def install() -> None:
    """Put the stand-in in place, unless pydantic's loader is imported already."""
    if LOADER not in sys.modules:
        stand_in = _StandIn(LOADER, __doc__)
        stand_in.__spec__ = importlib.machinery.ModuleSpec(LOADER, None)
        sys.modules[LOADER] = stand_in
