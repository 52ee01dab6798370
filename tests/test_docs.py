"""The Markdown docs stay navigable and true: links resolve, snippets import real names, and
the reference pages name every export and every config key."""

from __future__ import annotations

import ast
import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_PAGES = sorted(
    p
    for p in [
        *ROOT.glob("*.md"),
        *ROOT.glob("docs/**/*.md"),
        *ROOT.glob("benchmarks/*.md"),
        *ROOT.glob("examples/**/*.md"),
    ]
    if ".venv" not in p.parts
)


def test_there_are_docs_to_check() -> None:
    assert any(p.name == "README.md" and p.parent == ROOT for p in _PAGES)
    assert len(_PAGES) >= 5


@pytest.mark.parametrize("page", _PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: Path) -> None:
    broken = []
    for target in _LINK.findall(page.read_text(encoding="utf-8")):
        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
            continue  # external URL or in-page anchor
        path = target.split("#", 1)[0]
        if not (page.parent / path).exists():
            broken.append(target)
    assert not broken, f"{page.relative_to(ROOT)} links to missing {broken}"


@pytest.mark.parametrize("page", _PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_tables_are_not_cut_by_blank_lines(page: Path) -> None:
    """A blank line ends a Markdown table: rows after it render as a paragraph of pipes."""
    lines = page.read_text(encoding="utf-8").splitlines()
    cut = [
        n + 1
        for n in range(1, len(lines) - 1)
        if not lines[n].strip()
        and lines[n - 1].startswith("|")
        and lines[n + 1].startswith("|")
        and not re.match(r"^\|[-| :]+\|$", lines[n + 2] if n + 2 < len(lines) else "")
    ]
    assert not cut, f"{page.relative_to(ROOT)}: a blank line inside a table at line(s) {cut}"


def _code_spans(page: Path) -> set[str]:
    """Identifiers that open a code span on a page: `Name`, `Name(...)`, `[table]`."""
    text = page.read_text(encoding="utf-8")
    return set(re.findall(r"`\[?([A-Za-z_][A-Za-z0-9_]*)", text))


def test_python_api_page_lists_every_export() -> None:
    import p2pboost

    documented = _code_spans(ROOT / "docs" / "reference" / "python-api.md")
    missing = sorted(set(p2pboost.__all__) - documented)
    assert not missing, f"docs/reference/python-api.md does not mention {missing}"


def test_config_page_lists_every_key() -> None:
    from p2pboost.app import config

    keys = {
        *config._TOP,
        *config._TABLES,
        *config._DATA,
        *config._TRAIN_EXTRA,
        *config._BOOST,
        *config._PREDICT,
        *config._SERVE,
        *config._NODE,
        *config._COMPUTE,
    }
    documented = _code_spans(ROOT / "docs" / "reference" / "config.md")
    missing = sorted(keys - documented)
    assert not missing, f"docs/reference/config.md does not mention {missing}"


_PYTHON_BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)
_SNIPPETS = [
    pytest.param(code, id=f"{page.relative_to(ROOT)}#{n}")
    for page in _PAGES
    for n, code in enumerate(_PYTHON_BLOCK.findall(page.read_text(encoding="utf-8")))
]


@pytest.mark.parametrize("code", _SNIPPETS)
def test_python_snippets_compile_and_import_real_names(code: str) -> None:
    """Every ```python block parses, and every name it imports from p2pboost exists."""
    tree = ast.parse(code)
    for node in ast.walk(tree):
        # The transports install as p2pboost.transports: no page may teach the old top-level name.
        imported = [a.name for a in node.names] if isinstance(node, ast.Import) else []
        if isinstance(node, ast.ImportFrom):
            imported.append(node.module or "")
        assert not [n for n in imported if n.split(".")[0] == "transports"], imported
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "p2pboost":
            module = importlib.import_module(str(node.module))
            missing = [a.name for a in node.names if not hasattr(module, a.name)]
            assert not missing, f"{node.module} has no {missing}"


def test_cli_page_lists_every_command_and_option() -> None:
    import click

    from p2pboost.app.cli import cli

    page = (ROOT / "docs" / "reference" / "cli.md").read_text(encoding="utf-8")
    missing: list[str] = []

    def visit(command: click.Command, path: str) -> None:
        if path and path not in page:
            missing.append(path)
        for param in command.params:
            missing.extend(
                f"{path} {o}" for o in param.opts if o.startswith("--") and o not in page
            )
        if isinstance(command, click.Group):
            for name, sub in command.commands.items():
                visit(sub, f"{path} {name}".strip())

    visit(cli, "")
    assert not missing, f"docs/reference/cli.md does not mention {missing}"


@pytest.mark.slow
def test_the_simulation_tutorial_runs_as_a_script(tmp_path: Path) -> None:
    """Its code blocks, in order, saved as one file and run by a fresh interpreter, as a reader
    would: the parties' pools are spawned and re-import the script, which only the page's
    `if __name__ == "__main__":` guards survive (an exec in this process would not notice)."""
    page = ROOT / "docs" / "tutorial" / "simulate.md"
    script = tmp_path / "simulate_demo.py"
    script.write_text(
        "\n".join(_PYTHON_BLOCK.findall(page.read_text(encoding="utf-8"))), encoding="utf-8"
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "vertical AUC 0.9" in done.stdout
    assert "splits are the host's" in done.stdout
    assert "horizontal AUC 0.9" in done.stdout


_TOML_BLOCK = re.compile(r"```toml\n(.*?)```", re.S)


@pytest.mark.parametrize(
    ("page", "index"),
    [
        (page, i)
        for page in _PAGES
        for i, block in enumerate(_TOML_BLOCK.findall(page.read_text(encoding="utf-8")))
        if "role =" in block
    ],
    ids=lambda v: str(v.relative_to(ROOT)) if isinstance(v, Path) else str(v),
)
def test_party_files_in_the_docs_load(page: Path, index: int, tmp_path: Path) -> None:
    """Every whole party file a page shows is one the command accepts."""
    from p2pboost.app.config import load_config

    block = _TOML_BLOCK.findall(page.read_text(encoding="utf-8"))[index]
    (tmp_path / "party.toml").write_text(block, encoding="utf-8")
    load_config(tmp_path / "party.toml")
