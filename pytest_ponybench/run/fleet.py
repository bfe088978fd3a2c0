"""Cells on other hosts: xdist `--tx` workers that share no files with the controller.

A worker is *remote* when the controller's run directory is not its own: a gateway with
`chdir=` or one that is not `popen` (ssh, socket), or every worker under
`--ponybench-remote-workers`. For such a worker:

- out, in `workerinput` (`SHIPMENT_KEY`): the task files, the arms folder and the fixture
  trees the tasks seed, as one tar.gz in base64 (at most `MAX_SHIPMENT` bytes); the resolved
  settings; the run's stamp. The worker unpacks them into a scratch folder of its own host,
  collects the tasks from there (its node ids are the controller's: the tasks keep their path
  relative to the rootdir) and keeps its workspaces in a scratch run directory;
- back, on each cell's call report (`RETURN_ATTR`, a plain dict xdist serialises): the cell's
  workspace as a tar.gz in base64 (at most `MAX_RETURN` bytes of files; what does not fit stays
  on the worker's host and the record's `workspace_cut` says so), its spend-ledger lines and the
  run-directory control files of `RELAYED`. The controller writes them into its run directory;
- the budget: the controller keeps the one spend ledger (remote cells' lines written by it) and
  after every report sends each remote worker the run's spend (`CONTROL`, an xdist channel
  command the worker intercepts); the worker adds the cells the controller has not counted yet.
  A worker skips every cell once the run's spend reaches --ponybench-max-cost, so at most the
  cells in flight (one per worker) overshoot it.

Local workers (popen without chdir, not forced) share the run directory as before: nothing is
copied, nothing is relayed.

One module on purpose (about 600 lines): the two ends of one shipment, what the controller
sends a remote worker and what its reports carry home, must change together.
"""
from __future__ import annotations

import base64
import dataclasses
import io
import os
import re
import shutil
import socket
import tarfile
import tempfile
import threading
from pathlib import Path

import pytest
import yaml

from pytest_ponybench.cell import agent, confine as confinement, lifecycle as cells, workspace
from pytest_ponybench.store.record import CellRecord
from pytest_ponybench.store.rundir import (HARNESS_PREFIX, PAUSE_FILE, RunDir, ledger_total, read_jsonl,
                                           read_record, records_dir, write_atomic, write_record)

SHIPMENT_KEY = "ponybench_fleet"
RETURN_ATTR = "ponybench_return"  # the attribute a remote worker's call report carries home
CONTROL = "ponybench_control"  # the command the controller sends remote workers
MAX_SHIPMENT = 64 * 1024 * 1024  # tasks, arms and fixtures, packed
MAX_RETURN = 64 * 1024 * 1024  # one workspace's files, before packing
CUT_FIELD = "workspace_cut"

# Run-directory control files the controller relays between hosts: a worker's copy travels home
# with its reports, the controller's goes out to every remote worker when it changes.
# Run-directory control files every host must see: the shared 429 pause, and the controller's
# sealed judge proof (judging.py: a remote worker judges only with the run's proof).
RELAYED = [PAUSE_FILE, f"{HARNESS_PREFIX}.judge-proof.json"]

_PATH_SETTINGS = ("dir", "rescore", "resume", "tasks_dir", "arms_dir", "fixtures_dir")


class WorkerCannotStart(Exception):
    """This worker's host lacks what a cell needs; the message is one sentence naming the host."""


# --------------------------------------------------------------------------- which workers


def is_remote(spec, forced: bool) -> bool:
    """Does this gateway's worker see another filesystem (or is it told to act as if)?"""
    return bool(forced or getattr(spec, "chdir", None) or not getattr(spec, "popen", False))


def gateway_name(spec) -> str:
    """A gateway as its user wrote it, without the execmodel xdist adds."""
    parts = [p for p in str(getattr(spec, "_spec", spec)).split("//") if not p.startswith("execmodel=")]
    return "//".join(parts) or "popen"


def host_name() -> str:
    return socket.gethostname() or "this host"


# --------------------------------------------------------------------------- tar in memory


def _pack(entries: list[tuple[str, Path]]) -> bytes:
    """A tar.gz of (name in the archive, file or directory) entries; symlinks stay links."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=6) as tar:
        for arcname, path in entries:
            tar.add(str(path), arcname=arcname, recursive=False)
    return buffer.getvalue()


def _tree_entries(root: Path, arcroot: str, skip=None) -> list[tuple[str, Path]]:
    """Every directory and file under `root`, sorted, as archive entries under `arcroot`."""
    entries = [(arcroot, root)]
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not (skip and skip(d)))
        here = Path(dirpath)
        rel = here.relative_to(root)
        for name in dirnames:
            entries.append((f"{arcroot}/{(rel / name).as_posix()}", here / name))
        for name in sorted(filenames):
            if not (skip and skip(name)):
                entries.append((f"{arcroot}/{(rel / name).as_posix()}", here / name))
    return entries


def _unpack(data: bytes, dest: Path) -> list[str]:
    """Extract a tar.gz made by `_pack`; the names of members left out: those that would land
    outside `dest` (an agent's link to /etc, say) or are no file, folder or link."""
    root = Path(dest).resolve()
    refused: list[str] = []

    def keep(member, path):
        if hasattr(tarfile, "data_filter"):
            try:
                return tarfile.data_filter(member, path)
            except tarfile.FilterError:
                refused.append(member.name)
                return None
        target = (root / member.name).resolve()
        link = (target.parent / member.linkname).resolve() if member.issym() else target
        inside = all(p == root or root in p.parents for p in (target, link))
        if not inside or not (member.isfile() or member.isdir() or member.issym()):
            refused.append(member.name)
            return None
        return member

    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(root, filter=keep)
        else:  # a Python without extraction filters
            tar.extractall(root, members=[m for m in tar.getmembers() if keep(m, str(root)) is not None])
    return refused


# --------------------------------------------------------------------------- out: the shipment


def _fixture_variable(task_path: Path) -> str | None:
    """The $VARIABLE a task names its fixture by, or None for a folder under fixtures/."""
    try:
        raw = yaml.safe_load(Path(task_path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return None
    value = raw.get("fixture") if isinstance(raw, dict) else None
    return value[1:].strip("{}") if isinstance(value, str) and value.startswith("$") else None


def remote_settings(settings, task_folders: list, arm_folders: list[Path], has_evals: bool):
    """The settings a remote worker runs with: the run's one tasks folder (the project's or the
    shipped library's, as library.py chose) with its fixtures, and its one arms folder, as its
    only library (`off`: the worker has no other). Raises ValueError with one sentence for what
    cannot travel yet: two task or arm folders (`--ponybench-library add`), plugin folders given
    with --ponybench-plugin, imported eval suites."""
    if len(task_folders) != 1 or len(arm_folders) > 1 or settings.plugins or has_evals:
        raise ValueError(
            "remote workers get one tasks folder and one arms folder from the controller; this run has "
            f"{len(task_folders)} task folder(s), {len(arm_folders)} arm folder(s)"
            + (", --ponybench-plugin folders" if settings.plugins else "")
            + (", imported eval suites" if has_evals else "")
            + ": run it on local workers (-n N), or with --ponybench-library replace and the plugin as a "
              "YAML arm in the project's arms/")
    folder = task_folders[0]
    return dataclasses.replace(settings, tasks_dir=folder.tasks, fixtures_dir=folder.fixtures,
                               arms_dir=arm_folders[0] if arm_folders else settings.arms_dir, library="off")


def tasks_relpath(settings, rootpath: Path) -> tuple[str, bool]:
    """Where the tasks folder sits under the rootdir, and whether it is under it at all: the
    remote worker rebuilds that layout, so its node ids are the controller's. Under the rootdir
    they are rootdir-relative (`tasks/x.yaml::cell`); a folder outside it (the shipped library
    in a project with no tasks/) is an initial path of its own, and ids are relative to it
    (`x.yaml::cell`)."""
    try:
        return settings.tasks_dir.relative_to(Path(rootpath).resolve()).as_posix(), True
    except ValueError:
        return settings.tasks_dir.name, False


def settings_data(settings) -> dict:
    data = dataclasses.asdict(settings)
    for name in _PATH_SETTINGS:
        data[name] = None if data[name] is None else str(data[name])
    return data


def shipment(settings, rootpath: Path, tasks: list, stamp: str, limit: int = MAX_SHIPMENT) -> dict:
    """What every remote worker gets in its workerinput (plain data only). Raises ValueError
    with one sentence when the packed files exceed `limit`."""
    rel, under_root = tasks_relpath(settings, rootpath)
    entries: list[tuple[str, Path]] = [("tree", settings.tasks_dir.parent)]
    parts = Path(rel).parts
    for i in range(1, len(parts)):
        entries.append(("tree/" + "/".join(parts[:i]), settings.tasks_dir))  # directories only
    entries.append((f"tree/{rel}", settings.tasks_dir))
    for path in sorted(settings.tasks_dir.glob("*.y*ml")):
        entries.append((f"tree/{rel}/{path.name}", path))
    if settings.arms_dir.is_dir():
        entries += _tree_entries(settings.arms_dir, "arms", workspace._skipped)
    entries.append(("fixtures", settings.tasks_dir))  # an empty fixtures folder at least
    variables: dict[str, str] = {}
    fixtures_root = settings.fixtures_dir.resolve()
    for task in tasks:
        if task.fixture is None:
            continue
        var = _fixture_variable(task.path)
        if var:  # the worker points VAR at the copy; the task file stays as it is
            arcroot = variables[var] = f"fixture-vars/{var}"
            entries.append(("fixture-vars", task.fixture))
        else:
            rel_fixture = task.fixture.relative_to(fixtures_root)  # spec.py keeps it under fixtures/
            for i in range(1, len(rel_fixture.parts)):
                entries.append(("fixtures/" + "/".join(rel_fixture.parts[:i]), task.fixture))
            arcroot = f"fixtures/{rel_fixture.as_posix()}"
        if not any(name == arcroot for name, _ in entries):
            entries += _tree_entries(task.fixture, arcroot, workspace._skipped)
    data = _pack(_dedupe(entries))
    if len(data) > limit:
        raise ValueError(
            f"the tasks, arms and fixtures remote workers need pack to {len(data) / 2**20:.1f} MiB, over the "
            f"{limit / 2**20:.0f} MiB that may travel in workerinput; leave large files out of the fixtures "
            f"(see FIXTURE_SKIP) or run without remote workers")
    return {"bundle": base64.b64encode(data).decode("ascii"), "bundle_bytes": len(data), "tasks_rel": rel,
            "ids_under_root": under_root, "settings": settings_data(settings), "stamp": stamp, "fixture_vars": variables}


def _dedupe(entries: list[tuple[str, Path]]) -> list[tuple[str, Path]]:
    seen, kept = set(), []
    for arcname, path in entries:
        if arcname not in seen:
            seen.add(arcname)
            kept.append((arcname, path))
    return kept


# --------------------------------------------------------------------------- the worker's side


@dataclasses.dataclass
class Unpacked:
    scratch: Path
    settings: object  # options.Settings pointing at the scratch copies
    run_dir: RunDir
    claude: str
    kept: dict = dataclasses.field(default_factory=dict)  # resume: cell id -> the controller's finished record


def unpack_on_worker(config, settings_cls) -> Unpacked | None:
    """On a remote worker: unpack the shipment, point the settings at it, collect from it, find
    the CLI of this host. None on the controller and on local workers."""
    shipped = getattr(config, "workerinput", {}).get(SHIPMENT_KEY)
    if not shipped:
        return None
    worker = config.workerinput.get("workerid", "?")
    scratch = Path(tempfile.mkdtemp(prefix=f"ponybench-{worker}-")).resolve()
    try:
        return _unpack_into(config, settings_cls, shipped, scratch)
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise


def _unpack_into(config, settings_cls, shipped: dict, scratch: Path) -> Unpacked:
    _unpack(base64.b64decode(shipped["bundle"]), scratch)
    for var, arc in shipped["fixture_vars"].items():
        os.environ[var] = str(scratch / arc)  # a task's $VARIABLE fixture: the copy that travelled
    tree = scratch / "tree"
    data = dict(shipped["settings"])
    for name in _PATH_SETTINGS:
        data[name] = None if data[name] is None else Path(data[name])
    if data.get("rehearse_fault"):  # asdict made the rehearsal's Fault a plain dict to travel
        from pytest_ponybench.specs.faults import Fault

        data["rehearse_fault"] = Fault(**data["rehearse_fault"])
    data.update(tasks_dir=tree / shipped["tasks_rel"], arms_dir=scratch / "arms", fixtures_dir=scratch / "fixtures",
                dir=scratch / "runs", rescore=None, resume=None)
    settings = settings_cls(**data)
    root = Path(config.rootpath).resolve()
    where = f"on host {host_name()}"
    if root == tree or root in tree.parents:
        raise WorkerCannotStart(f"{where}: its scratch folder {scratch} lies under its rootdir {root}, so its "
                                f"node ids would not be the controller's; point TMPDIR on that host at a folder "
                                f"outside {root}")
    # Node ids are relative to the collected folder, as on the controller: the rebuilt rootdir
    # layout (`tasks/x.yaml::cell`), or the tasks folder itself when it lay outside the rootdir.
    config.args[:] = [str(tree if shipped.get("ids_under_root", True) else tree / shipped["tasks_rel"])]
    try:
        claude = agent.find_claude(settings.claude, root)
    except agent.CliMissing as exc:
        raise WorkerCannotStart(f"{where}: {exc} (each host needs its own CLI, found by the same rules "
                                f"relative to the gateway's chdir)") from None
    if not settings.rehearse:
        box = confinement.sandbox() if settings.confine is not False else None
        problem = agent.real_run_problem(own_user=bool(box and box.works and box.own_user))
        if problem:
            raise WorkerCannotStart(f"{where}: {problem}")
    run_dir = RunDir(settings.dir / shipped["stamp"])
    run_dir.path.mkdir(parents=True, exist_ok=True)
    for name, text in (shipped.get("relayed") or {}).items():  # as they were when this worker started
        if name in RELAYED and isinstance(text, str):
            write_atomic(run_dir.path / name, text)
    return Unpacked(scratch=scratch, settings=settings, run_dir=run_dir, claude=claude,
                    kept=shipped.get("kept") or {})


def pack_workspace(ws: Path, limit: int = MAX_RETURN) -> tuple[bytes, list[str]]:
    """A finished cell's workspace as a tar.gz, and the files left out to stay within `limit`
    bytes: the harness's own files first (identity, transcript, stderr, records), then the
    agent's, smallest first, so a single huge file costs the fewest others."""
    ws = Path(ws)
    dirs, files = [("ws", ws)], []
    entries = _tree_entries(ws, "ws")
    if records_dir(ws).is_dir():  # the harness's records of the cell, kept beside it
        entries += _tree_entries(records_dir(ws), "rec")
    for arcname, path in entries:
        if path.is_dir() and not path.is_symlink():
            dirs.append((arcname, path))
        else:
            size = path.lstat().st_size
            files.append((not (path.name.startswith("_ponybench") or arcname.startswith("rec/")), size, arcname, path))
    kept, cut, total = [], [], 0
    for _, size, arcname, path in sorted(files):
        if total + size <= limit:
            kept.append((arcname, path))
            total += size
        else:
            cut.append(arcname.split("/", 1)[1])
    return _pack(_dedupe(dirs) + kept), sorted(cut)


class WorkerFleet:
    """A remote worker's side of the run: the run's spend as the controller last told it, the
    relayed control files, and each finished cell's workspace packed onto its report."""

    def __init__(self, config, unpacked: Unpacked):
        self.config = config
        self.unpacked = unpacked
        self.run_dir = unpacked.run_dir
        self.spent_elsewhere = 0.0  # the run's spend as the controller last reported it
        self.counted: set[str] = set()  # this worker's cells in that figure
        self.lock = threading.Lock()
        self.left_behind = False  # a workspace did not fit home: keep the scratch folder

    def kept_result(self, cell) -> CellRecord | None:
        """Resume: the controller's finished record of this cell, if it holds one of this spec."""
        kept = self.unpacked.kept.get(cell.id)
        return CellRecord.from_json(kept) if kept is not None else None

    def spent(self) -> float:
        """The run's spend as far as this worker knows: the controller's figure plus this
        worker's own cells the controller had not counted yet."""
        with self.lock:
            total, counted = self.spent_elsewhere, set(self.counted)
        return total + ledger_total(read_jsonl(self.run_dir.spend_path), skip=counted)

    def control(self, spent: float, counted: list, files: dict) -> None:
        """A CONTROL command from the controller (in execnet's receiver thread)."""
        with self.lock:
            self.spent_elsewhere = float(spent)
            self.counted = set(counted)
        for name, text in files.items():
            if name not in RELAYED:
                continue  # only the run-directory control files named here travel
            path = self.run_dir.path / name
            if text is None:
                path.unlink(missing_ok=True)
            else:
                write_atomic(path, text)

    def pytest_sessionstart(self, session):
        """Intercept CONTROL commands on this worker's channel; xdist's own commands pass on.
        (xdist's worker loop ignores a command name it does not know.)"""
        for plugin in self.config.pluginmanager.get_plugins():
            if type(plugin).__name__ == "WorkerInteractor" and hasattr(plugin, "handle_command"):
                original = plugin.handle_command

                def handle_command(command, original=original):
                    if isinstance(command, tuple) and len(command) == 2 and command[0] == CONTROL:
                        self.control(**command[1])
                        return None
                    return original(command)

                plugin.handle_command = handle_command

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        cell = getattr(item, "cell", None)
        if call.when != "call" or cell is None:
            return
        report = outcome.get_result()
        if not report.skipped:  # a skipped cell (budget reached) left no workspace
            setattr(report, RETURN_ATTR, self.travelling_home(cell.id))

    def travelling_home(self, cell_id: str) -> dict:
        """What this cell's report carries to the controller (strings, numbers, lists, dicts)."""
        ws = self.run_dir.cell_dir(cell_id)
        data, cut = pack_workspace(ws) if ws.is_dir() else (b"", [])
        if cut:
            self.left_behind = True
        # The cell's own line and its judgements' ("<cell>/judge", "<cell>/graders/judge").
        spend = [e for e in read_jsonl(self.run_dir.spend_path)
                 if e.get("cell") == cell_id or str(e.get("cell", "")).startswith(cell_id + "/")]
        relayed = {}
        for name in RELAYED:
            try:
                relayed[name] = (self.run_dir.path / name).read_text(encoding="utf-8")
            except OSError:
                continue
        return {"tar": base64.b64encode(data).decode("ascii") if data else "", "cut": cut, "spend": spend,
                "relayed": relayed, "host": host_name(), "left_in": str(ws)}

    def pytest_unconfigure(self, config):
        if not self.left_behind:  # everything went home
            shutil.rmtree(self.unpacked.scratch, ignore_errors=True)


# --------------------------------------------------------------------------- the controller's side


def kept_records(state, tasks: list) -> dict[str, dict]:
    """Resume with remote workers: every cell of the run already finished under its present
    spec, as the record (its JSON form, which travels) a worker reports instead of running it.
    Nothing is moved here: a stale workspace is set aside when its new run comes home."""
    kept = {}
    for task in tasks:
        for cell in state.cells_for(task):
            record = cells.finished_record(state.run_dir.cell_dir(cell.id), state.run_dir, move=False)
            if record is not None and record.spec_hash == cell.spec_hash:
                kept[cell.id] = dataclasses.replace(record, reused=True).to_json()
    return kept


def remote_gateways(config) -> list[str]:
    """The gateways of this session whose workers are remote (empty without xdist)."""
    if config.getoption("dist", "no") == "no":
        return []
    try:
        import execnet
        from xdist.workermanage import parse_tx_spec_config
    except ImportError:
        return []
    forced = bool(config.getoption("ponybench_remote_workers", False))
    specs = [execnet.XSpec(s) for s in parse_tx_spec_config(config)]
    return [gateway_name(s) for s in specs if is_remote(s, forced)]


class ControllerFleet:
    """The controller's side: what remote workers get, what comes home with their reports,
    the run's spend sent back out, and a worker that cannot start stopping the run once.
    Registered as a plugin on the controller (its report hook runs before --junitxml's, so
    every output names the workspace copy on this machine)."""

    def __init__(self, state, forced: bool):
        self.state = state
        self.forced = forced
        self.remote_nodes: list = []
        self.counted: dict[str, list[str]] = {}  # worker id -> its cells whose spend is on the ledger
        self.sent_files: dict[str, str | None] = {}
        self.settings = None  # what remote workers run with (remote_settings), when not the run's own

    def configure_node(self, node, tasks: list, rootpath: Path) -> bool:
        """Fill a remote worker's workerinput; False for a local worker (nothing to do)."""
        spec = node.gateway.spec
        if not is_remote(spec, self.forced):
            return False
        if not hasattr(self, "_shipment"):
            try:
                self._shipment = shipment(self.settings or self.state.settings, rootpath, tasks, self.state.run_dir.name)
            except ValueError as exc:
                pytest.exit(f"ponybench: {exc}", returncode=pytest.ExitCode.USAGE_ERROR)
            if self.state.settings.resume is not None:
                self._shipment["kept"] = kept_records(self.state, tasks)
        relayed = {}
        for name in RELAYED:  # the control files as they are now (the judge's proof is made before any node)
            try:
                relayed[name] = (self.state.run_dir.path / name).read_text(encoding="utf-8")
            except OSError:
                continue
        node.workerinput[SHIPMENT_KEY] = {**self._shipment, "relayed": relayed}
        self.remote_nodes.append(node)
        return True

    def receive(self, report, props: dict, run_dir: RunDir) -> None:
        """A remote cell's report: its workspace, spend and relayed files into the run
        directory; the record's `workspace` then names the copy here."""
        home = getattr(report, RETURN_ATTR, None)
        if not isinstance(home, dict):
            return
        try:
            delattr(report, RETURN_ATTR)  # up to 64 MiB: no other hook needs it
        except AttributeError:
            pass
        cell_id = str(props.get("cell"))
        try:
            self._write_workspace(home, props, run_dir.cell_dir(cell_id), run_dir)
        except Exception as exc:  # a damaged archive must not cost the run its other cells
            props[CUT_FIELD] = f"the workspace from {home.get('host')} could not be written here: {exc}"
        worker = getattr(getattr(report, "node", None), "gateway", None)
        worker_id = getattr(worker, "id", "?")
        for entry in home.get("spend") or []:
            try:
                run_dir.record_spend(str(entry.get("cell")), entry.get("cost_usd"))
            except ValueError:  # not a cost the ledger believes: it never lowers the run's spend
                continue
            self.counted.setdefault(worker_id, []).append(str(entry.get("cell")))
        for name, text in (home.get("relayed") or {}).items():
            path = run_dir.path / name
            if name in RELAYED and isinstance(text, str) and (not path.is_file() or path.read_text() != text):
                write_atomic(path, text)

    @staticmethod
    def _write_workspace(home: dict, props: dict, ws: Path, run_dir: RunDir) -> None:
        if not home.get("tar"):
            return
        earlier = cells.finished_record(ws, run_dir, move=False) if ws.is_dir() else None
        if earlier is not None and earlier.spec_hash != props.get("spec_hash"):
            cells.set_aside(ws, earlier.spec_hash)  # a resume ran it again under another spec: keep the paid one
        elif ws.exists():
            workspace.fresh(ws)  # in flight when the run died: a resume starts it afresh, as here
            ws.rmdir()
        with tempfile.TemporaryDirectory(prefix="ponybench-home-", dir=ws.parent) as tmp:
            refused = _unpack(base64.b64decode(home["tar"]), Path(tmp))
            os.replace(Path(tmp) / "ws", ws)
            if (Path(tmp) / "rec").is_dir():
                records_dir(ws).parent.mkdir(parents=True, exist_ok=True)
                if records_dir(ws).exists():
                    shutil.rmtree(records_dir(ws))
                os.replace(Path(tmp) / "rec", records_dir(ws))
        props["workspace"] = str(ws.resolve())
        notes = []
        if home.get("cut"):
            notes.append(f"{len(home['cut'])} files over the {MAX_RETURN // 2**20} MiB limit stayed in "
                         f"{home.get('left_in')} on {home.get('host')}: " + ", ".join(home["cut"][:20]))
        if refused:
            notes.append("links leading outside the workspace were not recreated here: "
                         + ", ".join(name.split("/", 1)[-1] for name in refused[:20]))
        if notes:
            props[CUT_FIELD] = "; ".join(notes)
        # The record a resume reads names this copy too: sealed again (the worker sealed it
        # with the same key), and only when what came home verifies.
        record, problem = read_record(ws, workspace.RESULT, run_dir.key)
        if isinstance(record, dict) and problem is None:
            record["workspace"] = props["workspace"]
            if CUT_FIELD in props:
                record[CUT_FIELD] = props[CUT_FIELD]
            write_record(ws, workspace.RESULT, record, run_dir.key)

    def tell_workers(self, run_dir: RunDir) -> None:
        """The run's spend and control files to every remote worker still up."""
        if not self.remote_nodes:
            return
        files: dict[str, str | None] = {}
        for name in RELAYED:
            try:
                files[name] = (run_dir.path / name).read_text(encoding="utf-8")
            except OSError:
                files[name] = None
        changed = {k: v for k, v in files.items() if self.sent_files.get(k, None) != v}
        self.sent_files.update(files)
        spent = run_dir.spent()
        for node in list(self.remote_nodes):
            if getattr(node, "shutting_down", False):
                continue
            try:
                node.sendcommand(CONTROL, spent=spent, counted=self.counted.get(node.gateway.id, []), files=changed)
            except Exception:  # a worker that went down meanwhile: its channel is closed
                self.remote_nodes.remove(node)


    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report):
        run_dir = self.state.run_dir
        if report.when != "call" or run_dir is None:
            return
        if hasattr(report, RETURN_ATTR):
            props = dict(report.user_properties)
            if "cell" in props:
                self.receive(report, props, run_dir)
                report.user_properties[:] = list(props.items())
        self.tell_workers(run_dir)

    @pytest.hookimpl(optionalhook=True, tryfirst=True)  # before xdist prints the worker's traceback
    def pytest_testnodedown(self, node, error):
        problem = start_failure(node, error)
        if problem:
            pytest.exit(problem, returncode=pytest.ExitCode.USAGE_ERROR)


def start_failure(node, error) -> str | None:
    """One sentence when a worker went down before it was ready (it cannot start on its host,
    and xdist would start it again and again); None for a worker that crashed while running."""
    if hasattr(node, "workerinfo") or not error:
        return None
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    reason = lines[-1] if lines else str(error)
    reason = re.sub(r"^[\w.]*(Error|Exception|CannotStart): ", "", reason)  # the exception's class
    return (f"ponybench: the xdist worker {node.gateway.id} ({gateway_name(node.gateway.spec)}) could not start, "
            f"so the run stops instead of starting it again: {reason}")
