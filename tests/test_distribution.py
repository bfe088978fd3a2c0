"""The distribution as a user gets it: a wheel built from the repository, installed into a
fresh virtual environment outside the checkout (no system site packages), then rehearsals
run from a directory holding nothing of this project, and from one holding only a plugin.

The full library takes minutes; these runs keep to a few tasks with -k (one per kind:
surgical, fixture, open). The full library was rehearsed from the installed wheel once by
hand (docs/architecture.md, "Distribution").
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FEW = "csv_total or notes_health or open_md_toc"


def clean_env(**extra) -> dict[str, str]:
    """The environment of a user's shell: nothing pointing Python at this checkout."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTEST_ADDOPTS", "VIRTUAL_ENV") and not k.startswith("PYTEST_XDIST")}
    env.pop("PYTEST_CURRENT_TEST", None)
    env.update(extra)
    return env


def check(argv: list[str], cwd: Path, timeout: float = 600, **env) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, cwd=cwd, env=clean_env(**env), capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(map(str, argv))} exited {done.returncode}:\n" \
                                 f"{done.stdout[-4000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The python of a fresh venv holding the wheel built from a copy of the repository."""
    base = tmp_path_factory.mktemp("dist")
    source = base / "source"
    # The files git tracks, as a release is built from: not whatever another test has in the
    # checkout for a moment (test_attacks_sandbox plants a folder there and removes it, and a
    # copy of the whole tree under -n 2 met it half gone).
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    for name in filter(None, tracked.decode().split("\0")):
        if (REPO / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, source / name, follow_symlinks=False)
    check([sys.executable, "-m", "build", "--wheel", "--outdir", str(base / "dist"), str(source)], base)
    (wheel,) = (base / "dist").glob("pytest_ponybench-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    shipped = {p.stem for p in (REPO / "tasks").glob("*.yaml")}
    assert {Path(n).stem for n in names if n.startswith("pytest_ponybench/library/tasks/")} == shipped
    assert "pytest_ponybench/library/arms/plugins/small-diff/.claude-plugin/plugin.json" in names
    assert "pytest_ponybench/library/fixtures/notes-app/app/web.py" in names
    assert "pytest_ponybench/judge/judge_labels.yaml" in names  # ponybench-calibrate's labelled set
    assert not [n for n in names if "__pycache__" in n or "node_modules" in n or "/runs/" in n]
    venv = base / "venv"
    check([sys.executable, "-m", "venv", str(venv)], base)  # no --system-site-packages: fresh
    python = venv / "bin" / "python"
    check([str(python), "-m", "pip", "install", "--quiet", str(wheel)], base)
    where = check([str(python), "-c", "import pytest_ponybench as p; print(p.__file__)"], base).stdout.strip()
    assert Path(where).is_relative_to(venv), where  # the wheel's copy, not this checkout
    return python


def records(runs: Path) -> list[dict]:
    (run_dir,) = [d for d in runs.iterdir() if d.is_dir()]
    return [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]


def test_the_installed_wheel_rehearses_the_shipped_library_from_an_empty_directory(installed, tmp_path, claude_bin):
    empty = tmp_path / "empty"
    empty.mkdir()
    done = check([str(installed), "-m", "pytest", "--ponybench", "--ponybench-rehearse", "-k", FEW, "-n", "2",
                  "-p", "no:cacheprovider", f"--ponybench-claude={claude_bin}"], empty)
    found = records(empty / "runs")
    arms = {p.stem for p in (REPO / "arms").glob("*.yaml")}
    assert {(r["task"], r["arm"]) for r in found} == {(t, a) for t in FEW.split(" or ") for a in arms}
    assert [r["cell"] for r in found if not r["passed"]] == []
    assert {r["kind"] for r in found} == {"surgical", "fixture", "open"}
    for arm in arms:
        assert f"arm {arm}: proven" in done.stdout


def test_the_installed_wheel_finds_the_labelled_set_of_ponybench_calibrate(installed, tmp_path):
    # What ponybench-calibrate reads before its first judge request, from a directory holding
    # nothing: the labels and the shipped tasks they name, from the wheel. (Judging them through
    # the scripted judge is test_calibrate's.)
    from pytest_ponybench.run import calibrate

    done = check([str(installed), "-c", "from pytest_ponybench.run import calibrate; paths = "
                  "calibrate.labelled_set(None, None, None); print(len(calibrate.load_labels(*paths).items), *paths)"],
                 tmp_path)
    count, *paths = done.stdout.split()
    shipped = calibrate.load_labels(REPO / "pytest_ponybench/judge/judge_labels.yaml", REPO / "tasks", REPO / "fixtures")
    assert count == str(len(shipped.items)) and all(Path(p).is_relative_to(installed.parents[1]) for p in paths), \
        done.stdout


def test_the_installed_wheel_rehearses_a_plugin_pointed_at_from_its_own_folder(installed, tmp_path, claude_bin):
    plugin = tmp_path / "my-plugin"
    (plugin / ".claude-plugin").mkdir(parents=True)
    (plugin / ".claude-plugin" / "plugin.json").write_text(json.dumps({"name": "my-plugin", "version": "1.0.0"}))
    (plugin / "skills" / "terse").mkdir(parents=True)
    (plugin / "skills" / "terse" / "SKILL.md").write_text("---\nname: terse\ndescription: short code\n---\nBe terse.\n")
    context = json.dumps({"hookSpecificOutput": {"hookEventName": "SessionStart",
                                                 "additionalContext": "my-plugin is loaded: prefer the standard library."}})
    (plugin / "hooks").mkdir()
    (plugin / "hooks" / "hooks.json").write_text(json.dumps({"hooks": {"SessionStart": [{"hooks": [
        {"type": "command", "command": f"printf '%s\\n' '{context}'"}]}]}}))
    done = check([str(installed), "-m", "pytest", "--ponybench", "--ponybench-rehearse", "--ponybench-plugin", ".",
                  "-k", FEW, "-n", "2", "-p", "no:cacheprovider", f"--ponybench-claude={claude_bin}"], plugin)
    found = records(plugin / "runs")
    assert {(r["task"], r["arm"]) for r in found} == {(t, a) for t in FEW.split(" or ") for a in ("baseline", "my-plugin")}
    assert [r["cell"] for r in found if not r["passed"]] == []
    assert "arm my-plugin: proven" in done.stdout and "arm baseline: proven" in done.stdout
