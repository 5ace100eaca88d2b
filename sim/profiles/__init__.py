"""Hardware and model profiles loaded by name from validated YAML.

Invariant: profiles are frozen pydantic objects; see ``schema`` for the fields and
``registry`` for where names are looked up.
"""

from sim.profiles.registry import (
    available,
    builtin_profiles_dir,
    load_accelerator,
    load_file,
    load_model,
    load_node,
    load_profile,
    search_dirs,
)
from sim.profiles.schema import (
    AcceleratorProfile,
    HostLink,
    MLASpec,
    ModelProfile,
    NodeProfile,
    SlidingWindowSpec,
)

__all__ = [
    "AcceleratorProfile",
    "HostLink",
    "MLASpec",
    "ModelProfile",
    "NodeProfile",
    "SlidingWindowSpec",
    "available",
    "builtin_profiles_dir",
    "load_accelerator",
    "load_file",
    "load_model",
    "load_node",
    "load_profile",
    "search_dirs",
]
