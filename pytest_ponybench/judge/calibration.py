"""A judge's calibration on record, and whether it may gate.

`ponybench-calibrate` (calibrate.py) measures how far a judge agrees with labels and keeps
the figures here, per judge fingerprint; a judged gate (`--ponybench-judge`'s gates, and
ponybench-compare's) reads them back and asks `gate_problem` before it may gate.
"""
from __future__ import annotations

import json
from pathlib import Path

from pytest_ponybench.instruments import gate as instruments

FLOOR = 0.6  # Cohen's kappa of the gate's decision: "substantial" agreement (Landis and Koch)
MIN_LABELS = 40  # labels per axis below which no kappa is believed
GRADERS_AXIS = "graders"  # the axis of the judged graders (ponybench-calibrate --graders-labels)
# The labelled set of the shipped tasks, package data so that an installed wheel has it too.
SHIPPED_LABELS = Path(__file__).resolve().with_name("judge_labels.yaml")


def calibration_path(fingerprint: str, directory: Path | None = None) -> Path | None:
    base = directory if directory is not None else instruments.cache_dir()
    return None if base is None else Path(base) / "calibrations" / f"{fingerprint}.json"


def load_calibration(fingerprint: str, path: Path | None = None) -> dict | None:
    """The calibration on record for this judge fingerprint (`path`: a file given instead)."""
    target = path if path is not None else calibration_path(fingerprint)
    if target is None:  # no cache directory
        return None
    try:
        data = json.loads(Path(target).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("fingerprint") == fingerprint else None


def gate_problem(axis: str, calibration: dict | None) -> str | None:
    """Why a gate on `axis` may not use this judge (None when it may)."""
    if calibration is None:
        return "the judge has no calibration on record (run ponybench-calibrate with the same judge model and CLI)"
    figures = (calibration.get("axes") or {}).get(axis) or {}
    if figures.get("labels", 0) < MIN_LABELS:
        return f"its calibration has {figures.get('labels', 0)} labels on {axis}, fewer than {MIN_LABELS}"
    if not figures.get("passes_floor"):
        return (f"its calibration on {axis} is below the floor: decision kappa {figures.get('decision_kappa')} "
                f"(floor {FLOOR}), {figures.get('judged')} of {figures.get('labels')} labels judged")
    return None
