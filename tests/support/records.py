"""The harness's records of a cell, as tests read them: beside the workspace, in
`<run>/_ponybench.records/<cell>/<kind>.json` (rundir.records_dir), each `{kind, data, mac}`."""
from __future__ import annotations

import json
from pathlib import Path


def record_path(ws: Path, kind: str) -> Path:
    ws = Path(ws)
    return ws.parent / "_ponybench.records" / ws.name / f"{kind}.json"


def record_data(ws: Path, kind: str):
    return json.loads(record_path(ws, kind).read_text())["data"]


def plain(record: dict) -> dict:
    """A results.jsonl line without its MAC."""
    return {k: v for k, v in record.items() if k != "mac"}
