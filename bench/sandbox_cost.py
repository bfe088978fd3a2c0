"""What the check sandbox costs (sandbox.py): per check call, wall and CPU time with and without
it, for a check that does nothing (the sandbox's own cost: a cgroup, a clone into new PID
and mount namespaces, the mount view, the init's extra fork, the switch of user) and for the
good references of a few real tasks (a cell's checks as a cell runs them).

    python bench/sandbox_cost.py [TASK ...] [--calls 40] [--repeat 3]

The call's parts are differences of medians: a call whose check runs no agent code (the
supervisor, the call's process and, with the sandbox, its cgroup, namespaces, view and init),
what one host adds (the fork of the agent's side and its first load), what a second axis of
the same cell adds (under the same supervisor); and, as a floor, one fork of a process as
warm as the fork server.

Each mode runs in a process of its own (a fork server of its own): without the sandbox is
$PONYBENCH_NO_SANDBOX=1, the fallback of a machine without namespaces. CPU is this process's
and the fork server's with everything it reaped (supervisors, inits, checks). The last lines
estimate a rescore of 1,000 cells over the measured tasks, 4 at once on 2 cores.
"""
from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_TASKS = ["upload_path", "memo_rates", "node_quote"]


def _server_cpu() -> float:
    from pytest_ponybench.processes import procs
    server = procs._server
    if server is None or server.proc.poll() is not None:
        return 0.0
    fields = Path(f"/proc/{server.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
    utime, stime, cutime, cstime = (int(v) for v in fields[11:15])
    return (utime + stime + cutime + cstime) / os.sysconf("SC_CLK_TCK")


def _cpu() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime + _server_cpu()


def measure(calls: int, repeat: int, task_names: list[str]) -> dict:
    """In this process, in whichever mode its environment says: the figures as JSON."""
    from pytest_ponybench.cell import lifecycle as cell, workspace
    from pytest_ponybench.instruments import strength
    from pytest_ponybench.processes import sandbox
    from pytest_ponybench.scoring import checks

    out = {"sandbox": sandbox.support().describe()}
    with tempfile.TemporaryDirectory(prefix="ponybench-sandbox-cost-") as tmp:
        ws = Path(tmp) / "ws"
        ws.mkdir()
        (ws / "add.py").write_text("def add(a, b):\n    return a + b\n")
        check = {"correct": "assert load(FILE).add(1, 2) == 3"}
        checks.run_checks(check, ws, "add.py", 30)  # warm: the fork server
        # The parts of a call, as differences between these: a supervisor and a call that
        # runs no agent code; the same with one host (the agent's module loaded); two axes
        # under one supervisor, as a cell's checks run.
        kinds = {"call": check, "empty": {"correct": "pass"},
                 "two": {"correct": check["correct"], "safe": "assert load(FILE).add(-1, 1) == 0"}}
        for kind, code in kinds.items():
            walls, cpus = [], []
            for _ in range(calls):
                wall, cpu = time.perf_counter(), _cpu()
                verdicts = checks.run_checks(code, ws, "add.py", 30)
                walls.append(time.perf_counter() - wall)
                cpus.append(_cpu() - cpu)
                assert all(v.ok for v in verdicts.values()), verdicts
            out[kind] = {"wall": statistics.median(walls), "cpu": statistics.median(cpus)}
    out["fork"] = _fork_cost(calls)
    tasks_dir = REPO / "tasks"
    tasks = [t for t in strength.load_tasks(tasks_dir, REPO / "fixtures", set(task_names) or None) if t.refs]
    out["tasks"] = {}
    for task in tasks:
        runs = []
        for index in range(repeat + 1):
            with tempfile.TemporaryDirectory(prefix=f"ponybench-sandbox-cost-{task.name}-") as tmp:
                workspace.seed(task, Path(tmp), files=task.refs.good)
                wall, cpu = time.perf_counter(), _cpu()
                cell.judge(task, Path(tmp))
                if index:  # the first one warms the reference copy
                    runs.append((time.perf_counter() - wall, _cpu() - cpu))
        out["tasks"][task.name] = {"wall": statistics.median(r[0] for r in runs),
                                   "cpu": statistics.median(r[1] for r in runs), "checks": len(task.checks)}
    return out


def _fork_cost(times: int) -> dict:
    """A fork of a process holding what the fork server holds (its warm modules), whose child
    exits at once: the floor of every process a check call forks (a supervisor, the init, the
    check's process, a host)."""
    from pytest_ponybench.processes import procs

    for module in procs.WARM_MODULES:
        __import__(module)
    walls, cpus = [], []
    for _ in range(times):
        wall, cpu = time.perf_counter(), _cpu()
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
        walls.append(time.perf_counter() - wall)
        cpus.append(_cpu() - cpu)
    return {"wall": statistics.median(walls), "cpu": statistics.median(cpus)}


def run_mode(sandboxed: bool, args: list[str]) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    if sandboxed:
        env.pop("PONYBENCH_NO_SANDBOX", None)
    else:
        env["PONYBENCH_NO_SANDBOX"] = "1"
    done = subprocess.run([sys.executable, __file__, "--measure", *args], capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise SystemExit(f"the {'sandboxed' if sandboxed else 'unsandboxed'} run failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    args = sys.argv[1:]
    calls, repeat = 40, 3
    if "--calls" in args:
        at = args.index("--calls")
        calls = int(args[at + 1])
        del args[at:at + 2]
    if "--repeat" in args:
        at = args.index("--repeat")
        repeat = int(args[at + 1])
        del args[at:at + 2]
    if args[:1] == ["--measure"]:
        print(json.dumps(measure(int(args[1]), int(args[2]), args[3:])))
        return 0
    names = args or DEFAULT_TASKS
    forwarded = [str(calls), str(repeat), *names]
    without, with_ = run_mode(False, forwarded), run_mode(True, forwarded)
    print(f"with:    {with_['sandbox']}")
    print(f"without: {without['sandbox']}")
    print(f"{'':<24} {'wall ms':>16} {'cpu ms':>16}")
    print(f"{'':<24} {'without':>7} {'with':>8} {'without':>7} {'with':>8}")

    def row(name, a, b):
        print(f"{name:<24} {a['wall'] * 1000:7.1f} {b['wall'] * 1000:8.1f} {a['cpu'] * 1000:7.1f} {b['cpu'] * 1000:8.1f}")

    row(f"one check call (median of {calls})", without["call"], with_["call"])
    print("  its parts:")
    row("  a fork of the warm image", without["fork"], with_["fork"])
    row("  a call, no agent code", without["empty"], with_["empty"])
    host = {mode: {k: data["call"][k] - data["empty"][k] for k in ("wall", "cpu")} for mode, data in
            (("without", without), ("with", with_))}
    row("  + a host (one load)", host["without"], host["with"])
    second = {mode: {k: data["two"][k] - data["call"][k] for k in ("wall", "cpu")} for mode, data in
              (("without", without), ("with", with_))}
    row("  + a second axis", second["without"], second["with"])
    for name in with_["tasks"]:
        row(f"{name} ({with_['tasks'][name]['checks']} checks)", without["tasks"][name], with_["tasks"][name])
    extra_wall = (with_["call"]["wall"] - without["call"]["wall"]) * 1000
    extra_cpu = (with_["call"]["cpu"] - without["call"]["cpu"]) * 1000
    print(f"the sandbox adds {extra_wall:.1f} ms wall and {extra_cpu:.1f} ms CPU to each check call")
    if with_["tasks"]:
        for label, data in (("without", without), ("with", with_)):
            wall = statistics.mean(t["wall"] for t in data["tasks"].values())
            cpu = statistics.mean(t["cpu"] for t in data["tasks"].values())
            print(f"a rescore of 1,000 cells over these tasks, 4 at once on 2 cores, {label} the sandbox: "
                  f"about {1000 * max(cpu / 2, wall / 4):.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
