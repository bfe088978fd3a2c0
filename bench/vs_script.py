#!/usr/bin/env python3
"""The plugin against the original script it replaced, on the same stand-in CLI
(tests/fakes/fake_claude.py) and the same one-task matrix, run interleaved. Prints wall
time, CPU (every process of the run, reaped here), the share of the ideal wall time and, for
the plugin, the controller's peak memory; asserts nothing. `run` also prints the floor: the
stand-in started as often with no harness at all (it is a Python program, about 55 ms of CPU
a start on the 2-core machine this was written on), so what each harness adds is plain.

    python bench/vs_script.py run --cells 80 --at-once 4 [--agent-seconds 0] [--repeat 2]
    python bench/vs_script.py run --cells 64 --at-once 4,16,32 --agent-seconds 3
    python bench/vs_script.py rescore --cells 1000 --at-once 4
    python bench/vs_script.py collect --cells 10000
    ... --plugin-mode xdist    N cells at once as N xdist workers (default: one process, --ponybench-at-once N)

The original script is read at run time from ../shared/seed/run.py.txt beside the checkout
(or --script PATH) and copied into a temporary directory with a generated `tasks` module
whose scorer runs the same check code in process, as the script's scorers did; nothing of it
is kept. `--plugin-root` measures another checkout of the plugin (before and after).
`--plugin-args` adds pytest options to the plugin's runs (quoted, e.g. "--ponybench-cells-per-worker 8").
"""
from __future__ import annotations

import argparse
import ctypes
import json
import math
import os
import resource
import shlex
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
FAKE = HERE / "tests" / "fakes" / "fake_claude.py"
PR_SET_CHILD_SUBREAPER = 36

GOOD = "def add(a, b):\n    return a + b\n"
BAD = "def add(a, b):\n    return a - b\n"
CORRECT = 'add = find_function(load(FILE), "add")\nassert add(2, 3) == 5, "add(2, 3) is not 5"\n'
SAFE = 'add = find_function(load(FILE), "add")\nassert isinstance(add(1, 1), int), "add(1, 1) is not an int"\n'
TASK_YAML = {
    "description": "add two numbers", "file": "add.py", "prompt": "Write add(a, b) in add.py.",
    "checks": {"correct": CORRECT, "safe": SAFE},
    "refs": {"axis": "correct", "good": GOOD, "bad": BAD},
}

# The script's tasks module: the same checks, run in process as its scorers were.
SCRIPT_TASKS = textwrap.dedent('''
    import importlib.util, itertools, sys
    from pathlib import Path
    _n = itertools.count()
    CHECKS = {checks!r}

    def _score(workdir):
        def load(path):
            spec = importlib.util.spec_from_file_location(f"_m{{next(_n)}}", Path(workdir) / path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return module
        def find_function(module, *names):
            for name in names:
                if callable(getattr(module, name, None)):
                    return getattr(module, name)
            raise AssertionError("no function")
        result = {{"correct": 1, "safe": 1, "reason": "ok"}}
        for axis, code in CHECKS.items():
            try:
                exec(code, {{"load": load, "find_function": find_function, "FILE": "add.py"}})
            except BaseException as exc:
                result[axis], result["reason"] = 0, str(exc)
        return result

    TASKS = {{"add": {{"prompt": "Write add(a, b) in add.py.", "file": "add.py", "axis": "correct",
                     "good": {good!r}, "bad": {bad!r}, "seed": {{}}, "score": _score}}}}
''')


def become_subreaper() -> None:
    """Orphans of a run (a fork server whose harness exited) come here and are reaped here,
    so their CPU counts in this process's children's usage."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        pass


def reap_orphans(timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            time.sleep(0.05)  # an orphan still exiting; bench only, not the harness


def measure(argv: list[str], cwd: Path, env: dict, peak_file: Path | None = None) -> dict:
    usage0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wall = time.perf_counter() - start
    reap_orphans()
    usage1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (usage1.ru_utime - usage0.ru_utime) + (usage1.ru_stime - usage0.ru_stime)
    figures = {"wall": wall, "cpu": cpu, "code": done.returncode, "tail": done.stdout[-1500:]}
    if peak_file is not None and peak_file.exists():
        figures["peak_mb"] = int(peak_file.read_text()) / 1024
    return figures


# The plugin's controller, reporting its own peak memory (ru_maxrss of this process only).
CONTROLLER = textwrap.dedent('''
    import resource, sys
    import pytest
    code = pytest.main(sys.argv[2:])
    open(sys.argv[1], "w").write(str(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss))
    sys.exit(int(code))
''')


class Bench:
    def __init__(self, args, tmp: Path):
        self.args = args
        self.tmp = tmp
        self.plugin_root = args.plugin_root.resolve()
        self.project = tmp / "project"
        for folder in ("tasks", "arms"):
            (self.project / folder).mkdir(parents=True, exist_ok=True)
        import yaml

        (self.project / "tasks" / "add.yaml").write_text(yaml.safe_dump(TASK_YAML, sort_keys=False))
        (self.project / "arms" / "baseline.yaml").write_text("description: nothing added\n")
        (self.project / "pytest.ini").write_text("[pytest]\ntestpaths = tasks\n")
        self.script_dir = tmp / "s" / "b" / "bench"  # the script's ROOT is two levels above it
        self.script_dir.mkdir(parents=True, exist_ok=True)
        source = args.script or HERE.parent / "shared" / "seed" / "run.py.txt"
        if not source.is_file():
            raise SystemExit(f"the original script is not at {source}; pass --script PATH")
        text = source.read_text(encoding="utf-8")
        if "#!/usr/bin/env python3" in text:  # the stored copy starts with a page header
            text = text[text.index("#!/usr/bin/env python3"):]
        (self.script_dir / "run.py").write_text(text, encoding="utf-8")
        (self.script_dir / "tasks.py").write_text(SCRIPT_TASKS.format(
            checks={"correct": CORRECT, "safe": SAFE}, good=GOOD, bad=BAD))
        bin_dir = tmp / "bin"
        bin_dir.mkdir(exist_ok=True)
        (bin_dir / "claude").write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} {shlex.quote(str(FAKE))} \"$@\"\n")
        (bin_dir / "claude").chmod(0o755)
        self.claude = bin_dir / "claude"
        self.cache = tmp / "proof-cache"

    def env(self, agent_seconds: float) -> dict:
        spec = {"write": {"add.py": GOOD}}
        if agent_seconds > 0:
            spec.update(mode="sleep_then_ok", sleep=agent_seconds)
        fake_json = self.tmp / "fake.json"
        fake_json.write_text(json.dumps(spec))
        env = {**os.environ, "PONYBENCH_FAKE": str(fake_json), "ANTHROPIC_API_KEY": "fake", "IS_SANDBOX": "1",
               "PATH": f"{self.claude.parent}{os.pathsep}{os.environ.get('PATH', '')}",
               "PYTHONPATH": str(self.plugin_root), "PONYBENCH_CACHE_DIR": str(self.cache)}
        for var in ("PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER", "PYTEST_CURRENT_TEST"):
            env.pop(var, None)
        return env

    def plugin(self, cells: int, at_once: int, agent_seconds: float, *extra: str) -> dict:
        runs = self.project / "runs"
        peak = self.tmp / "peak.txt"
        peak.unlink(missing_ok=True)
        argv = [sys.executable, "-c", CONTROLLER, str(peak), "--ponybench", f"--ponybench-claude={self.claude}",
                f"--ponybench-dir={runs}", f"--runs={cells}", "-q", "-p", "no:cacheprovider",
                "-p", "no:benchmark", "-p", "no:hypothesispytest", *self.concurrency(at_once),
                *shlex.split(self.args.plugin_args), *extra]
        return measure(argv, self.project, self.env(agent_seconds), peak)

    def concurrency(self, at_once: int) -> list[str]:
        """pool: one pytest process running `at_once` cells; xdist: `at_once` workers."""
        if self.args.plugin_mode == "pool":
            return ["-n", "0", f"--ponybench-at-once={at_once}"]
        return ["-n", str(at_once if at_once > 1 else 0)]

    def script(self, cells: int, at_once: int, agent_seconds: float, *extra: str) -> dict:
        argv = [sys.executable, str(self.script_dir / "run.py"), *(extra or (
            "--task", "add", "--arms", "baseline", "--runs", str(cells), "--workers", str(at_once)))]
        return measure(argv, self.script_dir, self.env(agent_seconds))

    def floor(self, cells: int, at_once: int, agent_seconds: float) -> dict:
        """No harness at all: the stand-in started `cells` times, `at_once` at a time, each in
        an empty folder. What the stand-in itself costs (an interpreter start, its output), so
        the least any harness can take for this matrix on this machine."""
        work = self.tmp / "floor"
        code = textwrap.dedent(f"""
            import subprocess, sys
            from concurrent.futures import ThreadPoolExecutor
            from pathlib import Path
            def one(n):
                folder = Path({str(work)!r}) / str(n)
                folder.mkdir(parents=True, exist_ok=True)
                with open(folder / "out.jsonl", "wb") as out:
                    subprocess.run([{str(self.claude)!r}, "-p", "x", "--output-format", "stream-json", "--verbose"],
                                   cwd=folder, stdout=out, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
            with ThreadPoolExecutor({at_once}) as pool:
                list(pool.map(one, range({cells})))
        """)
        return measure([sys.executable, "-c", code], self.tmp, self.env(agent_seconds))

    def kept(self) -> bool:
        try:
            return bool(self.last_plugin_run() and self.last_script_run())
        except (OSError, IndexError):
            return False

    def last_plugin_run(self) -> Path:
        return sorted(p for p in (self.project / "runs").iterdir() if p.is_dir())[-1]

    def last_script_run(self) -> Path:
        return sorted(p for p in (self.script_dir / "runs").iterdir() if p.is_dir())[-1]


def line(name: str, f: dict, ideal: float | None = None, cells: int | None = None) -> str:
    text = f"  {name:7} wall {f['wall']:7.2f} s  CPU {f['cpu']:7.2f} s"
    if cells:
        text += f" ({f['cpu'] / cells * 1000:5.0f} ms/cell)"
    if ideal:
        text += f"  {ideal / f['wall'] * 100:4.0f}% of ideal"
    if "peak_mb" in f:
        text += f"  controller peak {f['peak_mb']:.0f} MB"
    if f["code"] not in (0, None):
        text += f"  EXIT {f['code']}: {f['tail'][-300:]!r}"
    return text


def run_matrix(bench: Bench, args) -> None:
    if not args.cold_gate:  # as after any earlier session with the same library
        warm = bench.plugin(1, 1, 0)
        print(f"(warm-up: one cell, the instruments proven and cached: wall {warm['wall']:.2f} s)")
    for at_once in [int(n) for n in args.at_once.split(",")]:
        ideal = math.ceil(args.cells / at_once) * args.agent_seconds if args.agent_seconds else None
        print(f"{args.cells} cells, {at_once} at once, agent {args.agent_seconds:g} s"
              + (f" (ideal {ideal:.0f} s)" if ideal else ""), flush=True)
        for attempt in range(args.repeat):
            plugin = bench.plugin(args.cells, at_once, args.agent_seconds)
            script = bench.script(args.cells, at_once, args.agent_seconds)
            floor = bench.floor(args.cells, at_once, args.agent_seconds)
            print(line("plugin", plugin, ideal, args.cells))
            print(line("script", script, ideal, args.cells))
            print(line("floor", floor, ideal, args.cells) + "  (the stand-in alone, no harness)")
            print(f"  ratio plugin/script: wall {plugin['wall'] / script['wall']:.2f}, "
                  f"CPU {plugin['cpu'] / max(script['cpu'], 1e-9):.2f}; harness beyond the floor: "
                  f"plugin {plugin['wall'] - floor['wall']:+.2f} s wall, {(plugin['cpu'] - floor['cpu']) / args.cells * 1000:.0f} ms CPU/cell; "
                  f"script {script['wall'] - floor['wall']:+.2f} s wall, {(script['cpu'] - floor['cpu']) / args.cells * 1000:.0f} ms CPU/cell",
                  flush=True)


def rescore(bench: Bench, args) -> None:
    at_once = int(args.at_once.split(",")[0])
    print(f"keeping {args.cells} instant cells of each ({at_once} at once) to rescore...", flush=True)
    if bench.kept():
        print("(reusing the kept runs in --workdir)")
    else:
        made_plugin = bench.plugin(args.cells, at_once, 0)
        made_script = bench.script(args.cells, at_once, 0)
        print(line("plugin", made_plugin, None, args.cells) + "   (the run)")
        print(line("script", made_script, None, args.cells) + "   (the run)")
    for attempt in range(args.repeat):
        plugin = bench.plugin(1, at_once, 0, f"--ponybench-rescore={bench.last_plugin_run()}")
        script = bench.script(0, at_once, 0, "--rescore", str(bench.last_script_run()))
        print(f"rescore of {args.cells} kept workspaces, plugin at {at_once} at once:")
        print(line("plugin", plugin, None, args.cells))
        print(line("script", script, None, args.cells) + "  (in-process, unisolated checks)")


def collect(bench: Bench, args) -> None:
    for attempt in range(args.repeat):
        f = bench.plugin(args.cells, 1, 0, "--co")
        print(f"--collect-only of {args.cells} cells: wall {f['wall']:.2f} s, peak {f.get('peak_mb', 0):.0f} MB"
              + (f"  EXIT {f['code']}" if f["code"] else ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("run", "rescore", "collect"))
    parser.add_argument("--cells", type=int, default=80)
    parser.add_argument("--at-once", default="4", help="comma-separated: cells at once (xdist workers / script threads)")
    parser.add_argument("--agent-seconds", type=float, default=0.0)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--script", type=Path, default=None)
    parser.add_argument("--plugin-root", type=Path, default=HERE)
    parser.add_argument("--plugin-args", default="")
    parser.add_argument("--workdir", type=Path, default=None,
                        help="keep the projects and runs here (default: a temporary directory); "
                             "rescore reuses the runs it finds there")
    parser.add_argument("--cold-gate", action="store_true",
                        help="no warm-up: the first plugin run proves every instrument (no cached proofs)")
    parser.add_argument("--plugin-mode", choices=("pool", "xdist"), default="pool",
                        help="N cells at once as one process (--ponybench-at-once N) or N xdist workers")
    args = parser.parse_args()
    become_subreaper()
    print(f"plugin {args.plugin_root.resolve()} ({args.plugin_mode}); {os.cpu_count()} cores; "
          f"load {os.getloadavg()[0]:.1f}")
    if os.environ.get("PYTHONDONTWRITEBYTECODE"):
        # Every Python process of both sides then compiles its modules (and pytest rewrites the
        # plugin's) from source: about 0.5 s more per pytest process than on a usual machine.
        print("note: PYTHONDONTWRITEBYTECODE is set; unset it to measure what a user's machine does")
    what = {"run": run_matrix, "rescore": rescore, "collect": collect}[args.what]
    if args.workdir is not None:  # kept: a rescore can reuse its runs
        args.workdir.mkdir(parents=True, exist_ok=True)
        what(Bench(args, args.workdir.resolve()), args)
        return
    with tempfile.TemporaryDirectory(prefix="ponybench-vs-script-") as tmp:
        what(Bench(args, Path(tmp)), args)


if __name__ == "__main__":
    main()
