"""xdist workers on other hosts (fleet.py): they get everything from the controller, every
workspace comes home, the run has one budget, and a worker that cannot start stops the run once.

`popen//chdir=DIR` gateways stand in for `ssh=HOST//chdir=DIR`: with --ponybench-remote-workers
(and always with chdir=) a worker is treated as remote, so it unpacks what the controller sent
into a scratch folder of its own (under TMPDIR, set per test) and never touches the
controller's run directory. The workers' folders A, B, C hold no tasks, arms or fixtures.
"""
from __future__ import annotations

import base64
import json
import math
import shutil
import socket
from pathlib import Path
from types import SimpleNamespace

import pytest

from pytest_ponybench.run import fleet, options
from pytest_ponybench.rehearsal.server import Fault
from pytest_ponybench.store import snapshot
from pytest_ponybench.store.rundir import RunDir
from pytest_ponybench.specs.spec import load_task
from support.benchproc import (
    ADD_TASK, FAKE, GOOD_ADD, QUIET, bench_args, calls, fake_env, only_run_dir, results, run, summary, write_project,
)
from pytest_ponybench.store.rundir import write_record
from support.records import record_data, record_path

KEY = b"k" * 32  # a run's key, as the controller and its workers share it

REPO = Path(__file__).resolve().parents[1]


def hosts(tmp_path: Path, *names: str) -> dict[str, Path]:
    """Empty working folders for the gateways, and a TMPDIR outside the project for the
    workers' scratch folders (a worker refuses one under its rootdir)."""
    made = {name: tmp_path / name for name in (*names, "hosttmp")}
    for path in made.values():
        path.mkdir()
    return made


def scratch_left(hosttmp: Path) -> list[str]:
    return sorted(p.name for p in hosttmp.glob("ponybench-gw*"))


def harness_files_under(folder: Path) -> list[str]:
    return sorted(str(p) for p in folder.rglob("_ponybench*"))


# --------------------------------------------------------------------------- through the real CLI

def rehearse_on_hosts(project: Path, claude_bin: str, where: dict, select: str, *extra: str, passed: int,
                      workers_on_a: int = 1) -> dict:
    """Rehearse the cells `-k select` picks on remote workers in the folders A and B (A with
    `workers_on_a` of them); assert that `passed` cells passed. The environment it ran in."""
    env = {"TMPDIR": str(where["hosttmp"])}
    on_a = f"{workers_on_a}*popen" if workers_on_a > 1 else "popen"
    args = ["--ponybench", "--ponybench-rehearse", f"--ponybench-claude={claude_bin}", *extra,
            f"--ponybench-dir={project / 'runs'}", *QUIET, "-k", select,
            "-d", "--tx", f"{on_a}//chdir={where['A']}", "--tx", f"popen//chdir={where['B']}",
            "--ponybench-remote-workers"]
    # A hang's safety net, under pytest-timeout's 600 s: a first session proves every shipped
    # instrument (about 25 s of CPU alone, several times that beside a loaded CI worker).
    done = run(project, args, env, timeout=560)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert f"{passed} passed" in done.stdout, done.stdout[-3000:]
    return env



def test_a_rehearsal_on_remote_workers_brings_every_workspace_home_and_rescores_the_same(tmp_path, claude_bin):
    where = hosts(tmp_path, "A", "B")
    project = tmp_path / "project"
    project.mkdir()
    for folder in ("tasks", "arms", "fixtures"):
        shutil.copytree(REPO / folder, project / folder)
    # An ini setting the workers cannot read (their rootdir has no ini): the arms list must
    # travel with the settings, or the workers would collect all four arms.
    (project / "pyproject.toml").write_text(
        '[tool.pytest.ini_options]\ntestpaths = ["tasks"]\nponybench_arms_list = "baseline,small-diff"\n')
    env = rehearse_on_hosts(project, claude_bin, where, "csv_total or notes_health", passed=4, workers_on_a=2)
    run_dir = only_run_dir(project)

    ran = results(run_dir)
    cells = sorted(r["cell"] for r in ran)
    assert cells == sorted(f"{task}__{arm}__haiku__0" for task in ("csv_total", "notes_health")
                           for arm in ("baseline", "small-diff"))
    assert all(r["passed"] and r["status"] == "finished" and r["rehearsal"] for r in ran), ran
    for record in ran:
        ws = run_dir / record["cell"]
        assert record["workspace"] == str(ws.resolve())
        assert "workspace_cut" not in record
        for name in ("_ponybench.transcript.jsonl", "_ponybench.stderr.txt"):
            assert (ws / name).is_file(), f"{record['cell']}: {name} did not come home"
        for kind in ("agent", "cell", "result"):  # the harness's records, beside the workspace
            assert record_path(ws, kind).is_file(), f"{record['cell']}: its {kind} record did not come home"
        kept = record_data(ws, "result")
        assert kept["workspace"] == record["workspace"]  # a resume reads this copy's path
        # The CLI ran in the worker's scratch folder, not in the controller's run directory.
        lines = [json.loads(line) for line in (ws / "_ponybench.transcript.jsonl").read_text().splitlines()]
        (init,) = [line for line in lines if line.get("subtype") == "init"]
        assert str(where["hosttmp"]) in init["cwd"] and str(run_dir) not in init["cwd"], init["cwd"]
    assert (run_dir / "notes_health__baseline__haiku__0" / ".git").is_dir()  # the agent's copy of the snapshot
    assert snapshot.snapshot_dir(run_dir / "notes_health__baseline__haiku__0").is_dir()  # the harness's, too
    assert len((run_dir / "_ponybench.spend.jsonl").read_text().splitlines()) == 4
    # The workers' folders got xdist's rsync of pytest, nothing of the benchmark; their scratch
    # folders were removed once everything went home.
    for name in ("A", "B"):
        assert not any((where[name] / sub).exists() for sub in ("tasks", "arms", "fixtures", "runs"))
        assert harness_files_under(where[name]) == []
    assert scratch_left(where["hosttmp"]) == []

    # The controller alone reproduces every figure from what came home.
    before = {r["cell"]: r for r in ran}
    again = run(project, [f"--ponybench-rescore={run_dir}", *QUIET], env, timeout=560)
    assert again.returncode == 0, again.stdout[-3000:]
    after = {r["cell"]: r for r in results(run_dir)}
    assert after == before


def test_a_project_with_no_tasks_of_its_own_runs_the_shipped_library_on_remote_workers(tmp_path, claude_bin):
    # The shipped library lies outside the project's rootdir: its node ids are relative to the
    # library's tasks folder, and the workers must collect exactly those.
    where = hosts(tmp_path, "A", "B")
    project = tmp_path / "plugin-repo"
    project.mkdir()
    rehearse_on_hosts(project, claude_bin, where, "csv_total or sql_lookup", "--arms=baseline", passed=2)
    ran = results(only_run_dir(project))
    assert sorted(r["cell"] for r in ran) == ["csv_total__baseline__haiku__0", "sql_lookup__baseline__haiku__0"]
    assert all(r["passed"] for r in ran)


def test_two_task_folders_on_remote_workers_are_refused_in_one_sentence(tmp_path):
    where = hosts(tmp_path, "A")
    root = write_project(tmp_path / "project", {"add": ADD_TASK})
    (root / "arms" / "baseline.yaml").rename(root / "arms" / "mine.yaml")  # beside the shipped baseline
    env = {**fake_env(root, write=GOOD_ADD), "TMPDIR": str(where["hosttmp"])}
    done = run(root, bench_args(root, "--ponybench-library=add", "-d", "--tx", f"popen//chdir={where['A']}",
                                "--ponybench-remote-workers"), env)
    assert done.returncode == pytest.ExitCode.USAGE_ERROR, done.stdout[-3000:] + done.stderr[-3000:]
    said = done.stdout + done.stderr
    assert "remote workers get one tasks folder and one arms folder" in said and "2 task folder(s)" in said
    assert calls(root) == []


# --------------------------------------------------------------------------- one budget, stand-in CLI

COST = 0.25
MAX_COST = 0.9


def test_the_budget_holds_across_three_remote_gateways_within_one_cell_per_worker(tmp_path):
    where = hosts(tmp_path, "A", "B", "C")
    root = write_project(tmp_path / "project", {"add": ADD_TASK})
    # Each cell takes half a second, so the workers really run side by side.
    env = {**fake_env(root, write=GOOD_ADD, cost=COST, mode="sleep_then_ok", sleep=0.5),
           "TMPDIR": str(where["hosttmp"])}
    gateways = [arg for name in ("A", "B", "C") for arg in ("--tx", f"popen//chdir={where[name]}")]
    done = run(root, bench_args(root, "--runs=12", f"--ponybench-max-cost={MAX_COST}", "-d", *gateways,
                                "--ponybench-remote-workers"), env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    run_dir = only_run_dir(root)

    ran = results(run_dir)
    workers = 3
    enough = math.ceil(MAX_COST / COST)  # the cell whose spend reaches the budget
    # Each worker counting only its own spend would run `enough` cells alone: 12 in all.
    assert enough <= len(ran) <= enough + workers - 1, [r["cell"] for r in ran]
    spent = summary(run_dir)["spent_usd"]
    assert spent == pytest.approx(len(ran) * COST)
    assert spent < MAX_COST + workers * COST
    skipped = 12 - len(ran)
    assert f"{skipped} cells skipped: budget reached" in done.stdout
    assert summary(run_dir)["budget_skipped"] == skipped
    assert len(calls(root)) == len(ran)
    # The CLI ran on the workers' scratch folders; every workspace is in the run directory.
    assert all(str(where["hosttmp"]) in call["cwd"] for call in calls(root))
    assert all((run_dir / r["cell"] / "add.py").read_text() == GOOD_ADD["add.py"] for r in ran)
    assert scratch_left(where["hosttmp"]) == []


def test_a_resume_on_remote_workers_reuses_what_the_controller_kept_and_pays_for_no_cell_twice(tmp_path):
    where = hosts(tmp_path, "A", "B")
    root = write_project(tmp_path / "project", {"add": ADD_TASK})
    env = {**fake_env(root, write=GOOD_ADD, cost=COST), "TMPDIR": str(where["hosttmp"])}
    gateways = ["-d", "--tx", f"popen//chdir={where['A']}", "--tx", f"popen//chdir={where['B']}"]
    first = run(root, bench_args(root, "--runs=6", "--ponybench-max-cost=0.6", *gateways), env)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-2000:]
    run_dir = only_run_dir(root)
    paid = {r["cell"] for r in results(run_dir)}
    assert 3 <= len(paid) < 6, paid  # the budget left cells for the resume

    again = run(root, bench_args(root, "--runs=6", f"--ponybench-resume={run_dir}", *gateways), env)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-2000:]
    every = {r["cell"]: r for r in results(run_dir)}
    assert sorted(every) == [f"add__baseline__haiku__{i}" for i in range(6)]
    assert {cell for cell, r in every.items() if r["reused"]} == paid
    assert all(r["passed"] for r in every.values())
    assert all((run_dir / cell / "add.py").is_file() for cell in every)
    # Each cell was paid for once: the fake CLI ran six times over both sessions.
    assert sorted(call["cwd"].rsplit("/", 1)[-1] for call in calls(root)) == sorted(every)
    assert summary(run_dir)["spent_usd"] == pytest.approx(6 * COST)


# --------------------------------------------------------------------------- a worker that cannot start


def test_a_worker_without_a_cli_on_its_host_stops_the_run_once_naming_it(tmp_path):
    where = hosts(tmp_path, "A", "B")
    root = write_project(tmp_path / "project", {"add": ADD_TASK})
    # The controller finds the project's pinned CLI; the workers, in A and B, find none.
    (root / "node_modules" / ".bin").mkdir(parents=True)
    (root / "node_modules" / ".bin" / "claude").symlink_to(FAKE)
    env = {**fake_env(root, write=GOOD_ADD), "TMPDIR": str(where["hosttmp"])}
    assert shutil.which("claude", path=os_path(env)) is None, "a claude on PATH would be found by the workers"
    args = ["--ponybench", f"--ponybench-dir={root / 'runs'}", *QUIET, "--runs=4",
            "-d", "--tx", f"2*popen//chdir={where['A']}", "--tx", f"popen//chdir={where['B']}"]
    done = run(root, args, env, timeout=120)
    output = done.stdout + done.stderr
    assert done.returncode == pytest.ExitCode.USAGE_ERROR, output[-3000:]
    said = [line for line in output.splitlines() if "could not start" in line]
    assert len(said) == 1, output[-3000:]
    assert any(f"(popen//chdir={where[name]})" in said[0] for name in ("A", "B")), said
    assert f"on host {socket.gethostname()}" in said[0] and "claude CLI was not found" in said[0]
    assert "replacing crashed worker" not in output and "Traceback" not in output
    assert calls(root) == []
    assert scratch_left(where["hosttmp"]) == []


def os_path(env: dict) -> str:
    import os

    return env.get("PATH", os.environ.get("PATH", ""))


# --------------------------------------------------------------------------- the pieces, in process


def test_which_gateways_are_remote():
    import execnet

    assert not fleet.is_remote(execnet.XSpec("popen"), forced=False)
    assert fleet.is_remote(execnet.XSpec("popen"), forced=True)
    assert fleet.is_remote(execnet.XSpec("popen//chdir=/tmp/x"), forced=False)
    assert fleet.is_remote(execnet.XSpec("ssh=user@host//chdir=/tmp/pb"), forced=False)
    assert fleet.gateway_name(execnet.XSpec("execmodel=main_thread_only//ssh=h//chdir=/x")) == "ssh=h//chdir=/x"


def a_cell_workspace(run_dir: Path, cell: str = "add__baseline__haiku__0", big: int = 0) -> Path:
    ws = run_dir / cell
    (ws / "pkg").mkdir(parents=True)
    write_record(ws, "cell", {"cell": cell}, KEY)
    (ws / "_ponybench.transcript.jsonl").write_text("x" * 300)
    write_record(ws, "result", {"cell": cell, "workspace": str(ws)}, KEY)
    (ws / "add.py").write_text(GOOD_ADD["add.py"])
    (ws / "pkg" / "huge.bin").write_bytes(b"\0" * big)
    return ws


def test_a_workspace_over_the_limit_keeps_the_harness_files_and_the_record_says_what_stayed(tmp_path):
    worker_run = tmp_path / "worker" / "runs" / "stamp"
    ws = a_cell_workspace(worker_run, big=5000)
    data, cut = fleet.pack_workspace(ws, limit=2000)
    assert cut == ["pkg/huge.bin"]

    home = RunDir(tmp_path / "controller", key=KEY)
    home.path.mkdir()
    (worker_run / "_ponybench.pause.json").write_text('{"until": 1}')
    report = SimpleNamespace(node=SimpleNamespace(gateway=SimpleNamespace(id="gw1")), **{fleet.RETURN_ATTR: {
        "tar": base64.b64encode(data).decode(), "cut": cut, "host": "h1", "left_in": str(ws),
        "spend": [{"cell": ws.name, "cost_usd": 0.5}], "relayed": {"_ponybench.pause.json": '{"until": 1}',
                                                                   "not-relayed.txt": "x"}}})
    props = {"cell": ws.name, "workspace": str(ws)}
    controller = fleet.ControllerFleet(SimpleNamespace(run_dir=home), forced=True)
    controller.receive(report, props, home)

    arrived = home.path / ws.name
    assert (arrived / "add.py").read_text() == GOOD_ADD["add.py"]
    assert (arrived / "_ponybench.transcript.jsonl").read_text() == "x" * 300
    assert not (arrived / "pkg" / "huge.bin").exists() and (arrived / "pkg").is_dir()
    assert props["workspace"] == str(arrived.resolve())
    assert "pkg/huge.bin" in props["workspace_cut"] and "on h1" in props["workspace_cut"]
    kept = record_data(arrived, "result")
    assert kept["workspace"] == props["workspace"] and kept["workspace_cut"] == props["workspace_cut"]
    assert home.spent() == pytest.approx(0.5) and controller.counted == {"gw1": [ws.name]}
    assert (home.path / "_ponybench.pause.json").read_text() == '{"until": 1}'
    assert not (home.path / "not-relayed.txt").exists()
    assert not hasattr(report, fleet.RETURN_ATTR)  # the blob is dropped once written


def test_a_remote_worker_counts_the_run_spend_the_controller_sent_plus_its_own_uncounted_cells(tmp_path):
    run_dir = RunDir(tmp_path / "runs" / "stamp")
    run_dir.path.mkdir(parents=True)
    worker = fleet.WorkerFleet(SimpleNamespace(), fleet.Unpacked(tmp_path, None, run_dir, "claude"))
    run_dir.record_spend("mine-1", 0.25)
    run_dir.record_spend("mine-2", 0.25)
    assert worker.spent() == pytest.approx(0.5)
    worker.control(spent=1.0, counted=["mine-1"], files={"_ponybench.pause.json": "{}", "other": "no"})
    assert worker.spent() == pytest.approx(1.25)  # the controller's figure holds mine-1, not mine-2
    assert (run_dir.path / "_ponybench.pause.json").read_text() == "{}"
    assert not (run_dir.path / "other").exists()
    worker.control(spent=1.25, counted=["mine-1", "mine-2"], files={"_ponybench.pause.json": None})
    assert worker.spent() == pytest.approx(1.25)
    assert not (run_dir.path / "_ponybench.pause.json").exists()


def test_a_worker_that_was_never_ready_is_named_once_a_crashed_one_is_not(tmp_path):
    import execnet

    gateway = SimpleNamespace(id="gw3", spec=execnet.XSpec("execmodel=main_thread_only//ssh=pb@box//chdir=/tmp/pb"))
    error = "Traceback (most recent call last):\n  File x\npytest.UsageError: on host box: no claude here\n"
    said = fleet.start_failure(SimpleNamespace(gateway=gateway), error)
    assert said == ("ponybench: the xdist worker gw3 (ssh=pb@box//chdir=/tmp/pb) could not start, so the run "
                    "stops instead of starting it again: on host box: no claude here")
    assert fleet.start_failure(SimpleNamespace(gateway=gateway, workerinfo={}), error) is None


def shipped_settings(project: Path, **changes) -> options.Settings:
    values = dict(enabled=True, models=["haiku"], arms=None, runs=1, timeout=60.0, dir=project / "runs",
                  claude=str(FAKE), rescore=None, rehearse=True, rehearse_ref="good", reference="baseline",
                  reference_given=False, resume=None, max_cost=None, max_cell_cost=None, confine=False, at_once=1, plots=False,
                  retries=2, retry_wait=10.0, rehearse_fault=Fault("529", 1), remote_workers=True, model_ids=[], tasks_dir=project / "bench" / "tasks",
                  arms_dir=project / "arms", fixtures_dir=project / "fixtures")
    values.update(changes)
    return options.Settings(**values)


def test_the_shipment_rebuilds_tasks_arms_and_fixtures_on_the_worker(tmp_path, monkeypatch):
    project = tmp_path / "project"
    (project / "bench" / "tasks").mkdir(parents=True)
    (project / "arms" / "plugins" / "p" / ".claude-plugin").mkdir(parents=True)
    (project / "arms" / "baseline.yaml").write_text("description: nothing\n")
    (project / "arms" / "plugins" / "p" / ".claude-plugin" / "plugin.json").write_text('{"name": "p"}')
    (project / "fixtures" / "app" / "src").mkdir(parents=True)
    (project / "fixtures" / "app" / "src" / "main.py").write_text("print(1)\n")
    (project / "fixtures" / "app" / "node_modules").mkdir()  # skipped, as when a workspace is seeded
    elsewhere = tmp_path / "elsewhere-repo"
    elsewhere.mkdir()
    (elsewhere / "lib.py").write_text("X = 1\n")
    monkeypatch.setenv("PB_TEST_REPO", str(elsewhere))
    task_text = "prompt: fix it\nopen: true\n"
    (project / "bench" / "tasks" / "one.yaml").write_text(task_text + "fixture: app\n")
    (project / "bench" / "tasks" / "two.yaml").write_text(task_text + "fixture: $PB_TEST_REPO\n")
    settings = shipped_settings(project)
    tasks = [load_task(p, settings.fixtures_dir) for p in sorted(settings.tasks_dir.glob("*.yaml"))]
    shipped = fleet.shipment(settings, project, tasks, "20260101-000000")
    assert shipped["tasks_rel"] == "bench/tasks" and shipped["fixture_vars"] == {"PB_TEST_REPO": "fixture-vars/PB_TEST_REPO"}
    json.dumps(shipped)  # plain data only: it travels in workerinput

    worker_dir = tmp_path / "A"
    worker_dir.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp_path / "hosttmp"))
    (tmp_path / "hosttmp").mkdir()
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    config = SimpleNamespace(workerinput={"workerid": "gw0", fleet.SHIPMENT_KEY: shipped}, rootpath=worker_dir,
                             args=[str(worker_dir)])
    got = fleet.unpack_on_worker(config, options.Settings)
    assert got.scratch.parent == (tmp_path / "hosttmp").resolve()
    assert config.args == [str(got.scratch / "tree")]
    assert got.settings.tasks_dir == got.scratch / "tree" / "bench" / "tasks"
    assert sorted(p.name for p in got.settings.tasks_dir.iterdir()) == ["one.yaml", "two.yaml"]
    assert (got.settings.arms_dir / "plugins" / "p" / ".claude-plugin" / "plugin.json").is_file()
    assert (got.settings.fixtures_dir / "app" / "src" / "main.py").read_text() == "print(1)\n"
    assert not (got.settings.fixtures_dir / "app" / "node_modules").exists()
    assert load_task(got.settings.tasks_dir / "two.yaml", got.settings.fixtures_dir).fixture == \
        (got.scratch / "fixture-vars" / "PB_TEST_REPO").resolve()
    assert got.run_dir.path == got.scratch / "runs" / "20260101-000000" and got.run_dir.path.is_dir()
    assert got.claude == str(FAKE.resolve()) and got.settings.max_cost is None and got.settings.runs == 1
    # Settings travel as plain data; the rehearsal's fault comes back as the object it was.
    assert got.settings.rehearse_fault == Fault("529", 1) and got.settings.retry_wait == 10.0

    # Without a CLI on this "host" the worker cannot start: one sentence, its scratch removed.
    config.workerinput[fleet.SHIPMENT_KEY] = {**shipped, "settings": {**shipped["settings"], "claude": "no-such-cli"}}
    with pytest.raises(fleet.WorkerCannotStart, match=f"^on host {socket.gethostname()}: --ponybench-claude: no-such-cli"):
        fleet.unpack_on_worker(config, options.Settings)
    assert sorted(p.name for p in (tmp_path / "hosttmp").iterdir()) == [got.scratch.name]


def test_a_shipment_over_its_limit_is_refused_in_one_sentence(tmp_path):
    project = tmp_path / "project"
    (project / "bench" / "tasks").mkdir(parents=True)
    (project / "arms").mkdir()
    (project / "arms" / "baseline.yaml").write_text("description: nothing\n")
    (project / "arms" / "noise.txt").write_bytes(bytes(range(256)) * 400)
    with pytest.raises(ValueError, match=r"pack to 0\.\d MiB, over the 0 MiB that may travel in workerinput"):
        fleet.shipment(shipped_settings(project), project, [], "stamp", limit=1000)


def test_links_an_agent_made_to_outside_its_workspace_are_not_recreated_on_the_controller(tmp_path):
    worker_run = tmp_path / "worker"
    ws = a_cell_workspace(worker_run)
    (ws / "passwd").symlink_to("/etc/passwd")
    (ws / "up").symlink_to("../../elsewhere")
    (ws / "inside").symlink_to("add.py")
    data, cut = fleet.pack_workspace(ws)
    assert cut == []
    home = RunDir(tmp_path / "controller", key=KEY)
    home.path.mkdir()
    report = SimpleNamespace(**{fleet.RETURN_ATTR: {"tar": base64.b64encode(data).decode(), "cut": [], "host": "h",
                                                    "left_in": str(ws), "spend": [], "relayed": {}}})
    props = {"cell": ws.name}
    fleet.ControllerFleet(SimpleNamespace(run_dir=home), forced=True).receive(report, props, home)
    arrived = home.path / ws.name
    assert (arrived / "inside").is_symlink() and (arrived / "inside").read_text() == GOOD_ADD["add.py"]
    assert not (arrived / "passwd").is_symlink() and not (arrived / "up").is_symlink()
    assert "not recreated here: passwd, up" in props["workspace_cut"] or \
        "not recreated here: up, passwd" in props["workspace_cut"], props


def test_a_judged_rehearsal_on_remote_workers_judges_every_cell_and_its_cost_comes_home(tmp_path, claude_bin):
    where = hosts(tmp_path, "A", "B")
    project = tmp_path / "project"
    (project / "tasks").mkdir(parents=True)
    shutil.copy(REPO / "tasks" / "csv_total.yaml", project / "tasks")  # one task: one instrument and judge proof
    shutil.copytree(REPO / "arms", project / "arms")
    (project / "pyproject.toml").write_text(
        '[tool.pytest.ini_options]\ntestpaths = ["tasks"]\nponybench_arms_list = "baseline,small-diff"\n')
    rehearse_on_hosts(project, claude_bin, where, "csv_total", "--ponybench-judge", "--ponybench-judge-votes=1",
                      passed=2)
    run_dir = only_run_dir(project)
    ran = results(run_dir)
    # The controller's proof reached the workers: each cell judged there, not "unproven".
    assert [r["judge_status"] for r in ran] == ["judged", "judged"], [r["judge_status"] for r in ran]
    assert all(r["over_engineering"] == 0 for r in ran)
    for record in ran:  # the kept judgement came home with the workspace
        assert list((run_dir / "_ponybench.records" / record["cell"]).glob("judge-*.json"))
    # The judge's cost on the workers is on the controller's one ledger, as judge cost.
    ledger = [json.loads(line)["cell"] for line in (run_dir / "_ponybench.spend.jsonl").read_text().splitlines()]
    assert sorted(c for c in ledger if c.endswith("/judge") and not c.startswith("proof:")) == \
        sorted(f"{r['cell']}/judge" for r in ran)
