"""The user journey: every bash and python block of README.md (and docs/) runs as pasted.

The blocks run in file order from the repository root, as a new user would after the README's
set-up (``.venv`` active): bash blocks with ``bash -e``, python blocks with the venv's Python.
The embedded servers they start are recorded in a registry of this test's own and stopped at
the end; the user-data directory is a temporary one. ``docs/sql.md``'s SQL blocks are run by
``test_sql_docs.py``. A block is left out only when the line before it says
``<!-- docs-test: skip (reason) -->``, and the list of those is fixed here.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cortex_pg.db import embedded

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(
    r"(?:<!-- docs-test: skip \((?P<skip>[^)]*)\) -->\n)?```(?P<lang>\w*)\n(?P<body>.*?)```", re.S
)
SKIPPED = {  # first line of the block -> why it is not run here
    "scripts/test": "it is the test suite that runs these blocks",
    "python -m venv .venv && . .venv/bin/activate": "the set-up itself",
    "docker compose up -d": "needs Docker",
}


def _blocks(lang: str | None = None) -> list[tuple[Path, str, str, str | None]]:
    """(document, language, body, skip reason) of each bash/python block, in file order."""
    out = []
    for doc in DOCS:
        for m in BLOCK.finditer(doc.read_text(encoding="utf-8")):
            if m.group("lang") in ("bash", "python") and lang in (None, m.group("lang")):
                out.append((doc, m.group("lang"), m.group("body"), m.group("skip")))
    return out


def _first_line(body: str) -> str:
    return body.strip().splitlines()[0].split("  #")[0].strip()


def test_the_blocks_left_out_are_exactly_the_known_ones():
    skipped = {_first_line(body) for _, _, body, skip in _blocks() if skip}
    assert skipped == set(SKIPPED)
    assert not any("…" in body or "../shared" in body for _, _, body, _ in _blocks())


def test_the_install_block_is_what_scripts_setup_does():
    (install,) = [b for _, _, b, s in _blocks("bash") if s and _first_line(b).startswith("python -m venv")]
    setup = (ROOT / "scripts" / "setup").read_text()
    for line in install.splitlines():
        command = line.split("#")[0].strip()
        if command.startswith("pip install"):
            args = command.removeprefix("pip install").strip().strip("'\"")
            assert args.split()[-1].strip("'\"") in setup, command


@pytest.fixture
def journey_env(tmp_path):
    env = {
        **os.environ,
        "PATH": f"{ROOT / '.venv' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
        "VIRTUAL_ENV": str(ROOT / ".venv"),
        "XDG_DATA_HOME": str(tmp_path / "data"),  # MemoryStore.open()'s user-data directory
        "CORTEX_PG_STATE_DIR": str(tmp_path / "state"),
        "HF_HUB_OFFLINE": "1",
    }
    for name in ("DATABASE_URL", "CORTEX_PG_HOME", "CORTEX_PG_EMBEDDER", "CORTEX_PG_DATABASE_URL"):
        env.pop(name, None)
    created = [p for p in (ROOT / "memory.db",) if not p.exists()]  # the calute example's directory
    yield env
    subprocess.run(["cortex-pg", "db", "stop", "--all"], env=env, capture_output=True, timeout=300)
    for path in created:
        shutil.rmtree(path, ignore_errors=True)


def test_every_readme_and_docs_block_runs_as_pasted(journey_env):
    ran = []
    for doc, lang, body, skip in _blocks():
        if skip:
            continue
        cmd = ["bash", "-e", "-o", "pipefail", "-c", body] if lang == "bash" else [sys.executable, "-c", body]
        out = subprocess.run(cmd, cwd=ROOT, env=journey_env, capture_output=True, text=True, timeout=900)
        assert out.returncode == 0, (
            f"{doc.name} block failed:\n{body}\n--- stdout\n{out.stdout}\n--- stderr\n{out.stderr}"
        )
        ran.append((body, out.stdout))
    assert len(ran) == len(_blocks()) - len(SKIPPED)
    demo = next(o for b, o in ran if _first_line(b) == "scripts/demo")
    assert "ltm+stm" in demo and " read, " in demo and "Maya" in demo
    where = next(o for b, o in ran if 'path=".cortex-demo"' in b)
    assert "notes;" in where and int(where.split()[0]) > 0
    served = next(o for b, o in ran if "cortex-pg serve" in b)
    assert '"status":"ok"' in served and '"user_id":"alice"' in served and "Lisbon" in served
    assert '"semantic_score":' in served and '"text_score":' in served
    assert '"type":"unauthorized"' in served and '"field":"Authorization"' in served
    stopped = next(o for b, o in ran if "db stop --all" in b)
    assert "stopped: " in stopped and not embedded.is_running(ROOT / ".cortex-demo")
