"""Build kvsim with its hot modules compiled by Cython, where a C compiler exists.

Everything about the distribution is in pyproject.toml; this file only adds the optional
compiled core (issue 25 item 5; docs/performance.md): the modules listed in
``sim/_core.py`` (``MODULES``) are cythonized in pure-Python mode (the ``.py`` sources as
they are) and compiled in parallel, as optional extensions. Without a C compiler, without
Cython, with ``KVSIM_NO_COMPILE=1`` in the build's environment, or when one module fails
to compile, the install still succeeds and that module runs from its source. The build
writes ``sim/_compiled.json`` (the SHA-256 of each source it compiled), so a module edited
after the build runs from its source (``sim._core``). ``pip install -e .`` builds in place:
the ``.c``, ``.so`` and ``_compiled.json`` outputs are git-ignored.
"""

from __future__ import annotations

import json
import os
import runpy
import shutil
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent
# sim/_core.py imports only the standard library: read without importing `sim` (whose
# dependencies a build environment lacks)
CORE = runpy.run_path(str(HERE / "sim" / "_core.py"))
MODULES: tuple[str, ...] = CORE["MODULES"]
#: pure-Python mode as is: no C types from annotations (they would reject an ABCMeta where
#: a `type` is annotated), Python-visible function objects (introspection, monkeypatching)
DIRECTIVES = {"language_level": 3, "binding": True, "annotation_typing": False}


class BuildCore(build_ext):
    """build_ext that cythonizes only when it can compile, in parallel, and records what
    it built; every failure leaves the pure path in place, with one line saying why."""

    def finalize_options(self) -> None:
        super().finalize_options()
        if not self.parallel:
            self.parallel = os.cpu_count() or 1
        self._built: set[str] = set()

    def build_extensions(self) -> None:
        reason = self._cannot_build()
        if reason:
            print(f"kvsim: compiled core not built ({reason}); the pure-Python core is used")
            self.extensions = []
            return
        from Cython.Build import cythonize

        exts = cythonize(self.extensions, compiler_directives=DIRECTIVES, quiet=True,
                         nthreads=int(self.parallel))  # fmt: skip
        for ext in exts:
            ext.optional = True  # a module that fails to compile runs from its source
            if self.compiler.compiler_type == "unix":
                ext.extra_compile_args = [*ext.extra_compile_args, "-g0"]  # 3x smaller, faster
        self.extensions = exts
        super().build_extensions()

    def _cannot_build(self) -> str | None:
        if os.environ.get("KVSIM_NO_COMPILE", "").strip() not in ("", "0"):
            return "KVSIM_NO_COMPILE is set"
        try:
            import Cython  # noqa: F401
        except ImportError:
            return "Cython is not installed"
        cc = getattr(self.compiler, "compiler_so", None)
        if cc and shutil.which(cc[0]) is None:
            return f"no C compiler ({cc[0]} not found)"
        return None

    def build_extension(self, ext: Extension) -> None:
        super().build_extension(ext)
        self._built.add(ext.name)  # reached only when it compiled (or was up to date)

    def run(self) -> None:
        super().run()
        # next to the built modules: the source tree (in place, editable) or build/lib
        package = Path(self.get_ext_fullpath("sim._compiled")).parent
        sources = {m: HERE.joinpath(*m.split(".")).with_suffix(".py") for m in self._built}
        manifest = {m: CORE["source_sha256"](p) for m, p in sorted(sources.items())}
        package.mkdir(parents=True, exist_ok=True)
        (package / CORE["MANIFEST"]).write_text(json.dumps(manifest, indent=1) + "\n")


setup(
    ext_modules=[
        Extension(m, [str(Path(*m.split(".")).with_suffix(".py"))], optional=True)
        for m in MODULES
    ],
    cmdclass={"build_ext": BuildCore},
)
