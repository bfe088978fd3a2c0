#!/usr/bin/env python3
"""The plugin against the original script it replaced, on the same stand-in CLI and the
same one-task matrix. Prints wall time, CPU (every process of the run, reaped here), the
share of the ideal wall time and, for the plugin, the controller's peak memory; asserts
nothing. `run` also measures the floor: the stand-in started as often with no harness at
all, so what each harness adds is plain ("harness CPU beyond the floor").

The stand-in (--stand-in) is by default a small C program built here at run time with the
machine's C compiler (near-free to start: it prints the stream-json lines, writes the file,
sleeps --agent-seconds), or tests/fakes/fake_claude.py (a Python start, about 55 ms of CPU).

Figures a reader can trust: before each round it waits for a quiet machine (1-minute load
under --quiet-load, at most --max-wait s); a round runs the three sides in a new shuffled
order; a round in which the rest of the machine used more than --max-other cores (from
/proc/stat) is discarded and run again; medians are printed with [lowest-highest] of the
kept rounds.

    python bench/vs_script.py run --cells 80 --at-once 4 [--agent-seconds 0] [--repeat 2]
    python bench/vs_script.py run --cells 64 --at-once 4,16,32 --agent-seconds 3 --repeat 3
    python bench/vs_script.py rescore --cells 1000 --at-once 4
    python bench/vs_script.py collect --cells 10000
    python bench/vs_script.py peak --cells 1000,10000 [--failing]   the controller's peak memory
    python bench/vs_script.py endphase --cells 10000 [--failing]      the session end's alone, in seconds:
        summary.json, summary.md and report.html of N records cloned from a 40-cell run
    python bench/vs_script.py scale --cells 1000,10000 [--failing] [--repeat 3] [--against CHECKOUT]
        per size: CPU per cell, the controller's peak, the rescore's and the collection's wall time
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
import random
import resource
import shlex
import subprocess
import statistics
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


def machine_busy() -> float:
    """CPU seconds every process of the machine has used since boot (/proc/stat), or NaN."""
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    except (OSError, IndexError):
        return math.nan
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(f) for f in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def wait_for_quiet(load: float, max_wait: float) -> None:
    """Wait (at most `max_wait` s) until the 1-minute load average is under `load`: other
    work on the machine shows up in every figure. Says so when it gave up waiting."""
    deadline = time.monotonic() + max_wait
    while os.getloadavg()[0] >= load and time.monotonic() < deadline:
        time.sleep(5)
    if os.getloadavg()[0] >= load:
        print(f"  (machine not quiet: load {os.getloadavg()[0]:.2f} after {max_wait:.0f} s; "
              f"disturbed measurements are still discarded)", flush=True)


def measure(argv: list[str], cwd: Path, env: dict, peak_file: Path | None = None) -> dict:
    """Wall and CPU (this process's reaped children) of one command, and `other`: the CPU
    seconds the rest of the machine used meanwhile, which tells a disturbed measurement."""
    usage0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    busy0 = machine_busy()
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wall = time.perf_counter() - start
    reap_orphans()
    busy1 = machine_busy()
    usage1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (usage1.ru_utime - usage0.ru_utime) + (usage1.ru_stime - usage0.ru_stime)
    figures = {"wall": wall, "cpu": cpu, "code": done.returncode, "tail": done.stdout[-1500:],
               "other": max(busy1 - busy0 - cpu, 0.0)}
    if peak_file is not None and peak_file.exists():
        figures["peak_mb"] = int(peak_file.read_text()) / 1024
    return figures


# A stand-in CLI that costs almost nothing to start: C, built here with the machine's C
# compiler (never committed as a binary). It answers `--version`, writes the task's file into
# its working directory, prints the stream-json lines the real CLI prints (init, one
# assistant message, the result) and sleeps PONYBENCH_STANDIN_SLEEP seconds before the result.
STANDIN_C = r'''
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
static const char *FILE_TEXT = %(text)s;
int main(int argc, char **argv) {
    const char *model = "claude-haiku-4-5-20251001";
    char cwd[4096];
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--version")) { puts("2.1.328 (Claude Code)"); return 0; }
        if (!strcmp(argv[i], "--model") && i + 1 < argc) model = argv[i + 1];
    }
    if (!getcwd(cwd, sizeof cwd)) strcpy(cwd, ".");
    FILE *out = fopen("add.py", "w");
    if (out) { fputs(FILE_TEXT, out); fclose(out); }
    printf("{\"type\": \"system\", \"subtype\": \"init\", \"claude_code_version\": \"2.1.328\", "
           "\"model\": \"%%s\", \"tools\": [\"Read\", \"Write\", \"Edit\", \"Glob\", \"Grep\"], "
           "\"plugins\": [{\"name\": \"builtin-thing\", \"path\": \"builtin\", \"source\": \"builtin\"}], "
           "\"cwd\": \"%%s\", \"permissionMode\": null, \"skills\": []}\n", model, cwd);
    printf("{\"type\": \"assistant\", \"message\": {\"id\": \"msg_1\", \"role\": \"assistant\", "
           "\"usage\": {\"input_tokens\": 100, \"output_tokens\": 20}, "
           "\"content\": [{\"type\": \"text\", \"text\": \"Working on it.\"}]}}\n");
    fflush(stdout);
    const char *nap = getenv("PONYBENCH_STANDIN_SLEEP");
    double seconds = nap ? atof(nap) : 0.0;
    if (seconds > 0) {
        struct timespec t = {(time_t)seconds, (long)((seconds - (time_t)seconds) * 1e9)};
        nanosleep(&t, NULL);
    }
    printf("{\"type\": \"result\", \"subtype\": \"success\", \"is_error\": false, \"result\": \"Done.\", "
           "\"num_turns\": 2, \"duration_ms\": 1500, \"duration_api_ms\": 1200, \"total_cost_usd\": 0.0123, "
           "\"usage\": {\"input_tokens\": 100, \"output_tokens\": 20}, "
           "\"modelUsage\": {\"%%s\": {\"costUSD\": 0.0123}}, \"permission_denials\": [], "
           "\"stop_reason\": \"end_turn\"}\n", model);
    return 0;
}
'''


def build_standin(folder: Path, text: str) -> Path:
    """The compiled stand-in, built with cc/gcc into `folder`; SystemExit naming what to do
    when there is no C compiler."""
    import shutil as _shutil

    compiler = _shutil.which("cc") or _shutil.which("gcc")
    if compiler is None:
        raise SystemExit("--stand-in c needs a C compiler (cc or gcc) on PATH; or use --stand-in python")
    source = folder / "standin.c"
    source.write_text(STANDIN_C % {"text": json.dumps(text)})
    binary = folder / "claude"
    subprocess.run([compiler, "-O2", "-o", str(binary), str(source)], check=True)
    return binary


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
        if args.stand_in == "c":
            self.claude = build_standin(bin_dir, BAD if args.failing else GOOD)
        else:
            (bin_dir / "claude").write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} {shlex.quote(str(FAKE))} \"$@\"\n")
            (bin_dir / "claude").chmod(0o755)
            self.claude = bin_dir / "claude"
        self.cache = tmp / "proof-cache"

    def env(self, agent_seconds: float) -> dict:
        spec = {"write": {"add.py": BAD if self.args.failing else GOOD}}
        if agent_seconds > 0:
            spec.update(mode="sleep_then_ok", sleep=agent_seconds)
        fake_json = self.tmp / "fake.json"
        fake_json.write_text(json.dumps(spec))
        env = {**os.environ, "PONYBENCH_FAKE": str(fake_json), "ANTHROPIC_API_KEY": "fake", "IS_SANDBOX": "1",
               "PATH": f"{self.claude.parent}{os.pathsep}{os.environ.get('PATH', '')}",
               "PYTHONPATH": str(self.plugin_root), "PONYBENCH_CACHE_DIR": str(self.cache),
               "PONYBENCH_STANDIN_SLEEP": str(agent_seconds)}
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


def spread(values: list[float], fmt: str = ".0f") -> str:
    """The median, then [lowest-highest] of the kept measurements."""
    if not values:
        return "-"
    return f"{statistics.median(values):{fmt}} [{min(values):{fmt}}-{max(values):{fmt}}]"


def disturbed(figures: dict, max_other: float) -> bool:
    """Whether the rest of the machine used more than `max_other` cores on average while this
    ran (NaN where /proc/stat is missing: never called disturbed)."""
    return figures["other"] / max(figures["wall"], 1e-9) > max_other


def run_matrix(bench: Bench, args) -> None:
    if not args.cold_gate:  # as after any earlier session with the same library
        warm = bench.plugin(1, 1, 0)
        print(f"(warm-up: one cell, the instruments proven and cached: wall {warm['wall']:.2f} s)")
    sides = {"plugin": bench.plugin, "script": bench.script, "floor": bench.floor}
    order = random.Random(args.seed)
    for at_once in [int(n) for n in args.at_once.split(",")]:
        ideal = math.ceil(args.cells / at_once) * args.agent_seconds if args.agent_seconds else None
        print(f"{args.cells} cells, {at_once} at once, agent {args.agent_seconds:g} s"
              + (f" (ideal {ideal:.0f} s)" if ideal else ""), flush=True)
        kept: list[dict] = []
        discarded = 0
        while len(kept) < args.repeat and discarded < args.max_discards:
            wait_for_quiet(args.quiet_load, args.max_wait)
            names = list(sides)
            order.shuffle(names)  # interleaved, in a new order each round: drift hits every side
            one = {name: sides[name](args.cells, at_once, args.agent_seconds) for name in names}
            noisy = [n for n in names if disturbed(one[n], args.max_other)]
            if noisy or any(one[n]["code"] not in (0, None) for n in names):
                discarded += 1
                print("  discarded (figures shown, not counted): " + ", ".join(
                    f"{n} wall {one[n]['wall']:.2f} s CPU {one[n]['cpu']:.2f} s" for n in names), flush=True)
                print("    why: " + "; ".join(
                    f"{n} {one[n]['other'] / max(one[n]['wall'], 1e-9):.2f} cores used by others"
                    + (f", EXIT {one[n]['code']}: {one[n]['tail'][-300:]!r}" if one[n]["code"] else "")
                    for n in names if n in noisy or one[n]["code"]), flush=True)
                continue
            kept.append(one)
            print("  kept: " + ", ".join(f"{n} wall {one[n]['wall']:.2f} s CPU {one[n]['cpu']:.2f} s" for n in names),
                  flush=True)
        print(f"  {len(kept)} kept, {discarded} discarded (others above {args.max_other:g} cores, or a failed run)")
        for name in sides:
            walls = [k[name]["wall"] for k in kept]
            cpu = [k[name]["cpu"] / args.cells * 1000 for k in kept]
            text = f"  {name:7} wall {spread(walls, '.2f')} s  CPU {spread(cpu)} ms/cell"
            if name != "floor":
                beyond = [(k[name]["cpu"] - k["floor"]["cpu"]) / args.cells * 1000 for k in kept]
                text += f"  harness CPU beyond the floor {spread(beyond)} ms/cell"
            if ideal:
                text += f"  {spread([ideal / w * 100 for w in walls])}% of ideal"
            peaks = [k[name]["peak_mb"] for k in kept if "peak_mb" in k[name]]
            if peaks:
                text += f"  controller peak {spread(peaks)} MB"
            print(text, flush=True)


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


def peak(bench: Bench, args) -> None:
    """The plugin alone at each of --cells (comma-separated), the stand-in answering at once:
    the controller's peak memory and the CPU per cell of the whole run."""
    for cells in [int(n) for n in str(args.cells_list).split(",")]:
        wait_for_quiet(args.quiet_load, args.max_wait)
        at_once = int(args.at_once.split(",")[0])
        f = bench.plugin(cells, at_once, 0)
        outcome = "failing" if args.failing else "passing"
        print(f"{cells} {outcome} cells, {at_once} at once: controller peak {f.get('peak_mb', 0):.0f} MB, "
              f"wall {f['wall']:.1f} s, CPU {f['cpu'] / cells * 1000:.0f} ms/cell, "
              f"others used {f['other'] / max(f['wall'], 1e-9):.2f} cores meanwhile"
              + (f"  EXIT {f['code']}" if f["code"] not in (0, 1) else ""), flush=True)


# A session's end (controller.Gathering.finish) replayed on N records cloned from a kept run,
# handed to the session as a run's cells hand them, in a process of its own: its peak memory
# above what gathering them cost (a checkout from before CellRecord gathered the JSON form, kept
# only the names and read the records back at the end).
END_PHASE = """
import json, resource, sys
from pathlib import Path
from pytest_ponybench.run import controller
from pytest_ponybench.store.rundir import RunDir
try:
    from pytest_ponybench.store.record import CellRecord
except ImportError:
    CellRecord = None
source, cells, scratch = Path(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
run = RunDir.create(scratch)
gathering = controller.Gathering(run)
lines = (source / "results.jsonl").read_text(encoding="utf-8").splitlines()
for i in range(cells):
    record = {k: v for k, v in json.loads(lines[i % len(lines)]).items() if k != "mac"}
    record.update(cell=f"{record['task']}__{record['arm']}__{record['model']}__{i}", run=i)
    gathering.add(CellRecord.from_json(record, gathering.shared) if CellRecord else record)
del lines
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
gathering.finish({}, "bench", True, "baseline", plots=False)
print(json.dumps({"before_mb": before / 1024,
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def endphase(bench: Bench, args) -> None:
    """The session's end alone at --cells records, each side's peak above its start."""
    bench.plugin(40, 4, 0)
    source = bench.last_plugin_run()
    for attempt in range(args.repeat):
        wait_for_quiet(args.quiet_load, args.max_wait)
        with tempfile.TemporaryDirectory(prefix="ponybench-endphase-") as scratch:
            start = time.monotonic()
            done = subprocess.run([sys.executable, "-c", END_PHASE, str(source), str(args.cells), scratch],
                                  env={**os.environ, "PYTHONPATH": str(args.plugin_root.resolve())},
                                  cwd=scratch,  # not a checkout: `-c` puts the cwd first on sys.path
                                  capture_output=True, text=True, check=False)
            wall = time.monotonic() - start
        if done.returncode:
            raise SystemExit(f"the end phase failed:\n{done.stderr[-2000:]}")
        f = json.loads(done.stdout.strip().splitlines()[-1])
        outcome = "failing" if args.failing else "passing"
        print(f"end of a session of {args.cells} {outcome} cells: peak {f['peak_mb']:.0f} MB "
              f"(+{f['peak_mb'] - f['before_mb']:.0f} MB over the records' writer), wall {wall:.1f} s", flush=True)


def collect(bench: Bench, args) -> None:
    for attempt in range(args.repeat):
        f = bench.plugin(args.cells, 1, 0, "--co")
        print(f"--collect-only of {args.cells} cells: wall {f['wall']:.2f} s, peak {f.get('peak_mb', 0):.0f} MB"
              + (f"  EXIT {f['code']}" if f["code"] else ""))


def scale_round(bench: Bench, cells: int, at_once: int) -> dict:
    """One plugin's figures at `cells` cells: the run (CPU per cell, the controller's peak),
    the rescore of its kept workspaces, and a --collect-only; the run is deleted afterwards."""
    run = bench.plugin(cells, at_once, 0)
    rescored = bench.plugin(1, at_once, 0, f"--ponybench-rescore={bench.last_plugin_run()}")
    collected = bench.plugin(cells, 1, 0, "--co")
    import shutil

    shutil.rmtree(bench.project / "runs", ignore_errors=True)  # 10,000 kept workspaces a round
    return {"run": run, "rescore": rescored, "collect": collected}


def scale(bench: Bench, args) -> None:
    """Per size of --cells: the CPU per cell of a whole run (every process, the stand-in
    included), the controller's peak, the rescore's wall time and the collection's, for this
    plugin and, with --against, another checkout in the same rounds (shuffled order). A round
    in which the rest of the machine used more than --max-other cores is discarded."""
    benches = {"plugin": bench}
    if args.against is not None:
        other = argparse.Namespace(**{**vars(args), "plugin_root": args.against})
        benches["against"] = Bench(other, bench.tmp / "against")
    order = random.Random(args.seed)
    at_once = int(args.at_once.split(",")[0])
    mode = f"{at_once} at once" if args.plugin_mode == "pool" else f"-n {at_once}"
    for cells in [int(n) for n in str(args.cells_list).split(",")]:
        print(f"{cells} {'failing' if args.failing else 'passing'} cells, {mode}, instant {args.stand_in} stand-in",
              flush=True)
        kept: list[dict] = []
        discarded = 0
        while len(kept) < args.repeat and discarded < args.max_discards:
            wait_for_quiet(args.quiet_load, args.max_wait)
            names = list(benches)
            order.shuffle(names)
            one = {name: scale_round(benches[name], cells, at_once) for name in names}
            steps = [(n, step, f) for n in names for step, f in one[n].items()]
            noisy = [f"{n} {step} {f['other'] / max(f['wall'], 1e-9):.2f} cores used by others"
                     for n, step, f in steps if disturbed(f, args.max_other)]
            failed = [f"{n} {step} EXIT {f['code']}: {f['tail'][-300:]!r}" for n, step, f in steps
                      if f["code"] not in (0, 1, None)]  # 1: failing cells
            shown = "; ".join(f"{n}: run {one[n]['run']['wall']:.1f} s, rescore {one[n]['rescore']['wall']:.1f} s"
                              for n in names)
            if noisy or failed:
                discarded += 1
                print(f"  discarded (not counted): {shown}\n    why: {'; '.join(noisy + failed)}", flush=True)
                continue
            kept.append(one)
            print(f"  kept: {shown}", flush=True)
        print(f"  {len(kept)} kept, {discarded} discarded (others above {args.max_other:g} cores, or a failed run)")
        for name in benches:
            rows = [k[name] for k in kept]
            print(f"  {name:7} CPU {spread([r['run']['cpu'] / cells * 1000 for r in rows], '.1f')} ms/cell"
                  f"  controller peak {spread([r['run'].get('peak_mb', 0) for r in rows])} MB"
                  f"  rescore {spread([r['rescore']['wall'] for r in rows], '.1f')} s"
                  f" (CPU {spread([r['rescore']['cpu'] for r in rows], '.1f')} s)"
                  f"  collection {spread([r['collect']['wall'] for r in rows], '.2f')} s", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("run", "rescore", "collect", "peak", "scale", "endphase"))
    parser.add_argument("--cells", default="80", help="cells (peak: comma-separated, e.g. 1000,10000)")
    parser.add_argument("--at-once", default="4", help="comma-separated: cells at once (xdist workers / script threads)")
    parser.add_argument("--agent-seconds", type=float, default=0.0)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--script", type=Path, default=None)
    parser.add_argument("--plugin-root", type=Path, default=HERE)
    parser.add_argument("--against", type=Path, default=None,
                        help="scale: another checkout of the plugin, measured in the same rounds (a before and after)")
    parser.add_argument("--plugin-args", default="")
    parser.add_argument("--workdir", type=Path, default=None,
                        help="keep the projects and runs here (default: a temporary directory); "
                             "rescore reuses the runs it finds there")
    parser.add_argument("--cold-gate", action="store_true",
                        help="no warm-up: the first plugin run proves every instrument (no cached proofs)")
    parser.add_argument("--stand-in", choices=("c", "python"), default="c",
                        help="the stand-in CLI: a small C program built here at run time (near-free to start), "
                             "or tests/fakes/fake_claude.py (a Python start, about 55 ms of CPU)")
    parser.add_argument("--failing", action="store_true",
                        help="the stand-in writes a wrong add(): every cell fails (the controller keeps failure reports)")
    parser.add_argument("--quiet-load", type=float, default=1.0,
                        help="wait before each round until the 1-minute load average is under this")
    parser.add_argument("--max-wait", type=float, default=120.0, help="seconds to wait for a quiet machine")
    parser.add_argument("--max-other", type=float, default=0.3,
                        help="discard a round in which the rest of the machine used more than this many cores")
    parser.add_argument("--max-discards", type=int, default=6)
    parser.add_argument("--seed", type=int, default=1, help="of the sides' order in each round")
    parser.add_argument("--plugin-mode", choices=("pool", "xdist"), default="pool",
                        help="N cells at once as one process (--ponybench-at-once N) or N xdist workers")
    args = parser.parse_args()
    args.cells_list, args.cells = args.cells, int(args.cells.split(",")[0])
    become_subreaper()
    print(f"plugin {args.plugin_root.resolve()} ({args.plugin_mode}); {os.cpu_count()} cores; "
          f"load {os.getloadavg()[0]:.1f}")
    if os.environ.get("PYTHONDONTWRITEBYTECODE"):
        # Every Python process of both sides then compiles its modules (and pytest rewrites the
        # plugin's) from source: about 0.5 s more per pytest process than on a usual machine.
        print("note: PYTHONDONTWRITEBYTECODE is set; unset it to measure what a user's machine does")
    what = {"run": run_matrix, "rescore": rescore, "collect": collect, "peak": peak, "scale": scale,
            "endphase": endphase}[args.what]
    if args.workdir is not None:  # kept: a rescore can reuse its runs
        args.workdir.mkdir(parents=True, exist_ok=True)
        what(Bench(args, args.workdir.resolve()), args)
        return
    with tempfile.TemporaryDirectory(prefix="ponybench-vs-script-") as tmp:
        what(Bench(args, Path(tmp)), args)


if __name__ == "__main__":
    main()
