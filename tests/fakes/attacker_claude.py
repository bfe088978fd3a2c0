#!/usr/bin/env python3
"""A stand-in `claude` CLI that attacks the harness from inside its cell, then behaves as
tests/fakes/fake_claude.py (whose spec, PONYBENCH_FAKE, says what it writes in the workspace).

The attacks to make are named in PONYBENCH_ATTACKS, comma-separated; each is what a hostile
agent with free file access would try (tests/test_attacks_agent.py). What each one managed is
written to `attack.json` in the workspace, so a test sees the agent's side as well as the
host's: `{attack: "done: ..." | "refused: <error>" | "nothing to attack"}`.

  results    read `../results.jsonl` (other cells' verdicts) and overwrite it with `{}`
  other_cell rewrite every other cell's add.py and its sealed result record
  ledger     overwrite `../_ponybench.spend.jsonl` with one line of negative cost
  pause      write `../_ponybench.pause.json` pausing the run for a day
  key        read the run id beside the workspace and copy the run's key into `stolen.key`
  link       plant links at temporary names the harness might write through
  read       read each file named in PONYBENCH_READ (os.pathsep-separated): task files, the
             harness's package, its temporary copies; what it read is kept in `read.txt`
  daemon     leave a process that hops (fork, the parent exits, setsid) for `daemon_s` seconds,
             its command line carrying PONYBENCH_DAEMON_MARK, so a test can look for it
"""
import json
import os
import sys
import time
from pathlib import Path

FAKE = Path(__file__).with_name("fake_claude.py")
HERE = Path.cwd()
RUN = HERE.parent
RECORDS = RUN / "_ponybench.records"
EVIL_ADD = "def add(a, b):\n    return 0  # rewritten by another cell's agent\n"


def other_cells() -> list[Path]:
    try:
        return [p for p in RUN.iterdir() if p.is_dir() and p != HERE and "__" in p.name]
    except OSError:
        return []


def attack_results() -> str:
    path = RUN / "results.jsonl"
    seen = path.read_text()
    (HERE / "seen.results.jsonl").write_text(seen)
    path.write_text("{}\n")
    return f"done: read {len(seen.splitlines())} lines of other cells' records, wrote {{}}"


def attack_other_cell() -> str:
    targets = other_cells()
    if not targets:
        return "nothing to attack"
    for other in targets:
        (other / "add.py").write_text(EVIL_ADD)
        (RECORDS / other.name / "result.json").write_text('{"kind": "result", "data": {}, "mac": ""}')
    return "done: rewrote " + ",".join(sorted(p.name for p in targets))


def attack_ledger() -> str:
    (RUN / "_ponybench.spend.jsonl").write_text(json.dumps({"cell": HERE.name, "cost_usd": -1000.0}) + "\n")
    return "done: the ledger now says -1000"


def attack_pause() -> str:
    (RUN / "_ponybench.pause.json").write_text(json.dumps({"until": time.time() + 86400, "cell": HERE.name}))
    return "done: paused for a day"


def attack_key() -> str:
    run_id = (RUN / "_ponybench.run-id").read_text().strip()
    folder = os.environ.get("PONYBENCH_KEY_DIR") or str(Path.home() / ".cache" / "pytest-ponybench" / "run-keys")
    key = (Path(folder) / f"{run_id}.key").read_bytes()
    (HERE / "stolen.key").write_bytes(key)
    return f"done: copied {len(key)} bytes of key"


def attack_link() -> str:
    planted = []
    for link, target in ((RECORDS / HERE.name / ".result.json.tmp", RUN / "results.jsonl"),
                         (RUN / ".results.jsonl.tmp", RUN / "_ponybench.spend.jsonl")):
        os.symlink(target, link)
        planted.append(str(link))
    return "done: planted " + ",".join(planted)


def attack_read() -> str:
    got = []
    for path in filter(None, os.environ.get("PONYBENCH_READ", "").split(os.pathsep)):
        try:
            text = Path(path).read_text()
        except OSError:
            continue
        got.append(path)
        with open(HERE / "read.txt", "a") as out:
            out.write(f"== {path}\n{text}\n")
    if not got:
        raise FileNotFoundError("none of the files could be read")
    return "done: read " + ",".join(got)


HOPPER = """
import os, sys, time
end = time.time() + float(sys.argv[2])
while time.time() < end:
    if os.fork():
        os._exit(0)  # the parent leaves: the child is an orphan with a new pid
    os.setsid()
"""


def attack_daemon() -> str:
    mark = os.environ.get("PONYBENCH_DAEMON_MARK", "ponybench-daemon")
    seconds = os.environ.get("PONYBENCH_DAEMON_S", "30")
    if os.fork() == 0:  # double fork and setsid: a daemon, as an agent would leave one
        os.setsid()
        if os.fork() == 0:
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(devnull, fd)
            os.execv(sys.executable, [sys.executable, "-c", HOPPER, mark, seconds])
        os._exit(0)
    return f"done: started {mark}"


def main(argv):
    if argv[:1] == ["--version"]:
        os.execv(sys.executable, [sys.executable, str(FAKE), *argv])
    report = {}
    for name in filter(None, os.environ.get("PONYBENCH_ATTACKS", "").split(",")):
        try:
            report[name] = globals()[f"attack_{name}"]()
        except OSError as exc:
            report[name] = f"refused: {exc.strerror or exc}"
    (HERE / "attack.json").write_text(json.dumps(report, indent=1))
    sys.stdout.flush()
    os.execv(sys.executable, [sys.executable, str(FAKE), *argv])


if __name__ == "__main__":
    main(sys.argv[1:])
