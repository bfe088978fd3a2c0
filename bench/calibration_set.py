"""Assemble ponybench-calibrate's labelled set from written submissions and their labels.

    python bench/calibration_set.py ITEMS LABELS... [--intent FILE] [--out FILE]

ITEMS holds one folder per submission with a meta.json ({id, task, source, files}); each
LABELS file, `labels-<labeller>.yaml`, maps a submission's id to {over_engineering: 0-3,
completeness: 0-3, note}. The output (default: the shipped set,
pytest_ponybench/judge/judge_labels.yaml) keeps of each submission only the files the judge
is shown (tests, docs and unchanged files add nothing but size) and every labeller's scores in
the order of `labellers`; --intent (a JSON {id: {origin}}) writes where each came from as a
comment, with each labeller's note, for readers only. docs/judge.md says how the shipped set was made.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from pytest_ponybench.judge import judge  # noqa: E402
from pytest_ponybench.judge.calibration import SHIPPED_LABELS  # noqa: E402
from pytest_ponybench.specs.spec import load_task  # noqa: E402

HEADER = """\
# The labelled set of ponybench-calibrate (docs/judge.md, "Calibration: may this judge gate?").
# Submissions written for the shipped tasks by people who saw only the ticket (and the seed), never
# the rubric; each scored 0-3 on both axes by every labeller named below, blind to the judge, to
# each other and to how the submission was made. The judge is measured against the lower median of
# their scores. Made by bench/calibration_set.py; a fixture task's files are the changed ones in full.
# Above each submission: where it came from (never shown to the labellers) and each labeller's note.
"""


class _Literal(yaml.SafeDumper):
    """Multi-line file contents as literal blocks, so the set reads like the code it holds."""


_Literal.add_representer(str, lambda dumper, text: dumper.represent_scalar(
    "tag:yaml.org,2002:str", text, style="|" if "\n" in text else None))
_Literal.add_representer(list, lambda dumper, items: dumper.represent_sequence(
    "tag:yaml.org,2002:seq", items, flow_style=all(isinstance(i, int) for i in items)))


def assemble(items_dir: Path, label_files: list[Path], intent: dict) -> tuple[str, int]:
    labellers = [p.stem.removeprefix("labels-") for p in label_files]
    scores = [yaml.safe_load(p.read_text(encoding="utf-8")) for p in label_files]
    tasks, entries = {}, []
    for meta_path in sorted(items_dir.glob("*/meta.json")):
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        ident = meta["id"]
        if not all(ident in given for given in scores):
            print(f"skipped {ident}: not labelled by every labeller", file=sys.stderr)
            continue
        task = tasks.setdefault(meta["task"], load_task(REPO / "tasks" / f"{meta['task']}.yaml", REPO / "fixtures"))
        shown = judge.task_submission(task, meta["files"]).paths
        origin = intent.get(ident, {}).get("origin", meta.get("source", ""))
        notes = "".join(f"\n#   {name}: {' '.join(str(given[ident].get('note', '')).split())}"
                        for name, given in zip(labellers, scores))
        entries.append((f"{meta['task']}, {origin}{notes}", {
            "id": ident, "task": meta["task"], "files": {rel: meta["files"][rel] for rel in shown},
            "labels": {axis: [int(given[ident][axis]) for given in scores] for axis in judge.AXES}}))
    body = yaml.dump({"labellers": labellers}, Dumper=_Literal, sort_keys=False) + "submissions:\n"
    for about, entry in sorted(entries, key=lambda e: (e[1]["task"], e[1]["id"])):
        body += f"# {entry['id']}: {about}\n" + yaml.dump([entry], Dumper=_Literal, sort_keys=False, width=1000)
    return HEADER + body, len(entries)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("items", type=Path)
    p.add_argument("labels", type=Path, nargs="+")
    p.add_argument("--intent", type=Path, default=None)
    p.add_argument("--out", type=Path, default=SHIPPED_LABELS)
    args = p.parse_args(argv)
    intent = json.loads(args.intent.read_text(encoding="utf-8")) if args.intent else {}
    text, count = assemble(args.items, sorted(args.labels), intent)
    args.out.write_text(text, encoding="utf-8")
    print(f"{count} submissions, {len(args.labels)} labellers: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
