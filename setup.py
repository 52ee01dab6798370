"""Build of the optional native kernel (p2pboost.crypto._native, C over GMP), and the packages.

Everything else about the package is in pyproject.toml.

The packages: ``p2pboost`` and its subpackages, and the repository's ``transports/`` folder,
installed as ``p2pboost.transports`` (``package_dir`` maps the name to the folder), so that
installing p2pboost puts no generic top-level ``transports`` package into a user's
site-packages, where another project's package of that name would collide. The mapped name is
added explicitly rather than found: in the source tree ``p2pboost/transports`` is a link to the
folder (so that the tests, mypy and import-linter see the package under its name), and a
checkout that does not keep links must still build the same wheel.

The extension is optional: without a C compiler or without GMP's headers (libgmp-dev) the build
prints why and installs the pure Python package, which runs the same kernels on gmpy2
(p2pboost.crypto.kernels chooses at import). ``P2PBOOST_NATIVE=0`` skips the build on purpose;
``P2PBOOST_NATIVE=1`` makes a failed build an error instead of a warning.
"""

from __future__ import annotations

import os
import sys

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext

_WANT = os.environ.get("P2PBOOST_NATIVE", "auto").strip().lower()

#: The transports' folder and the name it installs under.
_TRANSPORTS = "p2pboost.transports"
_PACKAGES = sorted(
    {
        *find_packages(
            include=["p2pboost", "p2pboost.*"], exclude=[_TRANSPORTS, _TRANSPORTS + ".*"]
        ),
        _TRANSPORTS,
        *(f"{_TRANSPORTS}.{name}" for name in find_packages(where="transports")),
    }
)


class OptionalBuildExt(build_ext):
    """build_ext that falls back to the pure package when the kernel cannot be compiled."""

    def run(self) -> None:
        if _WANT in ("0", "no", "off", "false"):
            print("p2pboost: P2PBOOST_NATIVE=0, native kernel not built", file=sys.stderr)
            return
        try:
            super().run()
        except Exception as exc:  # no compiler at all: setuptools raises before compiling
            self._fallback(exc)

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:  # compiler or GMP headers missing, or the compile failed
            self._fallback(exc)

    def copy_extensions_to_source(self) -> None:
        # After a failed build, an older build's library must not be copied into the tree.
        if not getattr(self, "_failed", False):
            super().copy_extensions_to_source()

    def _fallback(self, exc: Exception) -> None:
        self._failed = True
        if _WANT in ("1", "yes", "on", "true", "required"):
            raise exc
        print(
            f"p2pboost: native kernel not built ({type(exc).__name__}: {exc}); "
            "the gmpy2 kernel will be used",
            file=sys.stderr,
        )


setup(
    packages=_PACKAGES,
    package_dir={_TRANSPORTS: "transports"},
    ext_modules=[
        Extension(
            "p2pboost.crypto._native",
            sources=[
                f"p2pboost/crypto/_native_src/{name}.c"
                for name in ("module", "modulus", "ifma", "products", "fixed_base", "owner")
            ],
            depends=[f"p2pboost/crypto/_native_src/{name}.h" for name in ("native", "ifma")],
            libraries=["gmp"],
            extra_compile_args=[
                "-O3",
                "-std=c11",
                "-Wall",
                "-Wextra",
                "-Wno-unused-parameter",
                "-Wno-missing-field-initializers",
                "-Wno-cast-function-type",
            ],
            optional=True,
        )
    ],
    cmdclass={"build_ext": OptionalBuildExt},
)
