"""The README and docs/ as a new user reads them: their links lead somewhere, and their first
commands and examples run as written (the longer examples are run by the tests of their parts:
test_default_search, test_trackers, test_workers, test_notebook)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.test_workers import readme_worker_commands

README = (ROOT / "README.md").read_text()
DOCS = sorted((ROOT / "docs").glob("*.md"))


def blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", text, re.S)


def block_after(text: str, marker: str, lang: str) -> str:
    return blocks(text.split(marker, 1)[1], lang)[0]


def test_the_readme_is_a_short_guide_and_its_links_lead_to_files():
    assert len(README.splitlines()) <= 200
    for path in [ROOT / "README.md", *DOCS]:
        for target in re.findall(r"\]\(([^)#]+)\)", path.read_text()):
            if target.startswith("http"):
                continue
            assert (path.parent / target).exists(), f"{path.name} links to missing {target}"
    # Every docs page is reachable from the README.
    assert {p.name for p in DOCS} <= set(re.findall(r"\(docs/([^)]+)\)", README))


def _venv_env() -> dict[str, str]:
    """The environment a person has after `. .venv/bin/activate`: the venv's bin first."""
    bin_dir = Path(sys.executable).parent
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
            "PYTHONPATH": str(ROOT)}


@pytest.mark.skipif(not (ROOT / ".venv" / "bin" / "activate").exists(),
                    reason="no .venv in the checkout (make test makes it)")
def test_the_activate_lines_run_as_written():
    """`. .venv/bin/activate`, `tune --help`, `tune --version`, in a shell from the checkout."""
    lines = [ln for ln in block_after(README, "Activate it", "bash").splitlines() if ln.strip()]
    assert lines[0] == ". .venv/bin/activate"
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    env["PATH"] = "/usr/bin:/bin"  # a fresh shell: no venv on the PATH before activating
    done = subprocess.run(["bash", "-c", " && ".join(lines)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Usage: tune" in done.stdout and re.search(r"^tunepilot \d", done.stdout, re.M)


def test_the_own_training_code_example_runs_as_written(tmp_path: Path):
    """my_train.py and my_space.toml as the README prints them (and docs/trainers.md, the
    same), then the command, in a fresh folder."""
    section = README.split("## Tune your own training code", 1)[1]
    (tmp_path / "my_train.py").write_text(blocks(section, "python")[0])
    (tmp_path / "my_space.toml").write_text(blocks(section, "toml")[0])
    command = blocks(section, "bash")[0].strip()
    assert command == "tune run --trainer my_train:train --config my_space.toml"
    trainers_page = (ROOT / "docs" / "trainers.md").read_text()
    for part in (blocks(section, "python")[0], blocks(section, "toml")[0], command):
        assert part in trainers_page
    done = subprocess.run(command.split(), cwd=tmp_path, env=_venv_env(), capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "budget of 12 trials used" in done.stdout
    best = float(re.search(r"best: trial \d+, validation loss (\S+)", done.stdout).group(1))
    assert best < 1.0  # the stand-in's floor is 1/3, at lr = 3e-3: the search got near it


def test_the_python_example_runs_as_written(tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)  # no key: Optuna alone, said so
    code = block_after(README, "## From Python and notebooks", "python")
    scope: dict = {}
    exec(compile(code, "README.md", "exec"), scope)
    result = scope["result"]
    assert result.n_finished <= 30 and result.best_value < 1e-4
    assert (tmp_path / "tunepilot.db").exists()


def test_the_worker_commands_of_the_readme_and_of_docs_are_the_same():
    """test_workers runs the README's; docs/overnight.md must show the same ones."""
    docs = (ROOT / "docs" / "overnight.md").read_text()
    block = block_after(README, "### Several workers, one study", "bash")
    assert block in docs and len(readme_worker_commands()) == 2


def _slug(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def test_every_cited_benchmark_section_exists():
    """Code, docs and the README cite measured figures as `bench/README.md#section`, never
    copying the figure: every such anchor is a heading of bench/README.md."""
    bench = (ROOT / "bench" / "README.md").read_text()
    anchors = {_slug(h) for h in re.findall(r"^#+ (.+)$", bench, re.M)}
    sources = [*(ROOT / "tunepilot").rglob("*.py"), ROOT / "README.md", *DOCS,
               *(ROOT / "bench").glob("*.py")]
    cited = {(p.relative_to(ROOT).as_posix(), a) for p in sources
             for a in re.findall(r"bench/README\.md#([\w-]+)", p.read_text())}
    assert cited, "nothing cites bench/README.md by anchor: the pattern is stale"
    missing = sorted((path, a) for path, a in cited if a not in anchors)
    assert missing == [], f"cited sections that bench/README.md lacks: {missing}"
    # The old form, `bench/README.md, "Section"`, cannot be checked: none is left.
    old = [p.relative_to(ROOT).as_posix() for p in sources
           if re.search(r'bench/README\.md[,:]\s*"?[A-Z]', p.read_text())]
    assert old == []
