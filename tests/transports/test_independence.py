"""Transports are a bytes-only layer: they load, and raise, nothing of p2pboost.

They install as ``p2pboost.transports`` (so importing them imports the ``p2pboost`` package
first, as for any subpackage); the repository's ``transports/`` folder is the same code, and
loaded on its own it must need nothing of p2pboost. The old top-level name ``transports``
still works for one release, with a DeprecationWarning, and never takes the name from another
package.
"""

from __future__ import annotations

import os
import site
import subprocess
import sys
from pathlib import Path

from p2pboost import transports
from p2pboost.transports import errors

ROOT = Path(__file__).resolve().parents[2]


def _python(code: str, *, cwd: Path, path: list[Path | str]) -> str:
    """Run ``code`` with exactly ``path`` (plus the standard library) to import from: no site
    hooks (so no editable install's finder), ``PYTHONPATH`` as given."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(p) for p in path)}
    out = subprocess.run(
        [sys.executable, "-S", "-c", code],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        cwd=cwd,
        env=env,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_the_transports_folder_loads_no_p2pboost_module() -> None:
    code = (
        "import sys, transports, transports.memory, transports.websocket;"
        f"assert transports.__file__.startswith({str(ROOT / 'transports')!r});"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'p2pboost'))"
    )
    assert _python(code, cwd=ROOT, path=[ROOT, *site.getsitepackages()]) == "[]"


def test_installed_name_is_p2pboost_transports() -> None:
    assert transports.__name__ == "p2pboost.transports"
    assert Path(transports.__file__ or "").resolve().parent == ROOT / "transports"


def test_the_old_name_is_an_alias_with_a_warning(tmp_path: Path) -> None:
    # Only p2pboost on the path (a link to it), no top-level transports folder: as installed.
    (tmp_path / "p2pboost").symlink_to(ROOT / "p2pboost", target_is_directory=True)
    code = (
        "import sys, warnings, p2pboost, p2pboost.transports.errors as new\n"
        "with warnings.catch_warnings(record=True) as seen:\n"
        "    warnings.simplefilter('always')\n"
        "    import transports.errors as old\n"
        "notes = sorted(str(w.message) for w in seen if w.category is DeprecationWarning)\n"
        "print(*notes, sep='\\n')\n"
        "print(old.TransportError is new.TransportError, sys.modules['transports'].Transport"
        " is p2pboost.transports.Transport)\n"
    )
    path: list[Path | str] = [tmp_path, *site.getsitepackages()]
    assert _python(code, cwd=tmp_path, path=path).splitlines() == [
        "the module 'transports' is now 'p2pboost.transports': import it from there (the old"
        " name goes in the next release)",
        "the module 'transports.errors' is now 'p2pboost.transports.errors': import it from"
        " there (the old name goes in the next release)",
        "True True",
    ]


def test_another_package_called_transports_wins(tmp_path: Path) -> None:
    (tmp_path / "p2pboost").symlink_to(ROOT / "p2pboost", target_is_directory=True)
    other = tmp_path / "other"
    (other / "transports").mkdir(parents=True)
    (other / "transports" / "__init__.py").write_text("WHO = 'another project'\n")
    code = "import p2pboost, transports; print(transports.WHO)"
    path: list[Path | str] = [tmp_path, *site.getsitepackages(), other]
    assert _python(code, cwd=tmp_path, path=path) == "another project"


def test_transport_errors_keep_the_standard_families() -> None:
    assert issubclass(errors.TransportError, ConnectionError)
    assert issubclass(errors.HandshakeError, errors.TransportError)
    assert issubclass(errors.FrameTooLarge, errors.TransportError)
    assert issubclass(errors.TransportConfigError, ValueError)
    assert issubclass(errors.TransportUsageError, RuntimeError)
    assert errors.HandshakeError("x").certificate_refused is False
    for name in errors.__all__:
        assert name in (errors.__doc__ or ""), name
        assert getattr(transports, name) is getattr(errors, name)
