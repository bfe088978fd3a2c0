"""Per task x arm x model aggregation, with the original benchmark's definitions, and the
table printed in pytest's terminal summary."""
from __future__ import annotations

import statistics
from collections import defaultdict


def _mean(values, digits):
    values = [v for v in values if v is not None]
    return round(statistics.mean(values), digits) if values else None


def _median(values):
    return statistics.median(values) if values else 0


def aggregate(records: list[dict]) -> list[dict]:
    """One row per task x arm x model. LOC statistics use only cells that delivered code
    (total_loc > 0): a cell that wrote nothing says nothing about size, and shows up in
    wrote_file_rate instead."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for record in records:
        groups[(record["task"], record["arm"], record["model"])].append(record)
    rows = []
    for (task, arm, model), cells in sorted(groups.items()):
        n = len(cells)
        delivered = [c for c in cells if (c.get("total_loc") or 0) > 0]
        with_tokens = [c for c in cells if c.get("out_tokens") is not None]
        rows.append({
            "task": task, "arm": arm, "model": model, "n": n,
            "safe_rate": round(sum(c.get("safe") or 0 for c in cells) / n, 3),
            "correct_rate": round(sum(c.get("correct") or 0 for c in cells) / n, 3),
            "wrote_file_rate": round(len(delivered) / n, 3),
            "total_loc_median": _median([c["total_loc"] for c in delivered]),
            "total_loc_max": max((c["total_loc"] for c in delivered), default=0),
            "src_loc_median": _median([c["src_loc"] for c in delivered]),
            "src_files_median": _median([c["src_files"] for c in delivered]),
            "wrote_tests_rate": round(sum(1 for c in cells if (c.get("test_files") or 0) > 0) / n, 3),
            "cost_mean": _mean([c.get("cost_usd") for c in cells], 4),
            "out_tokens_mean": _mean([c["out_tokens"] for c in with_tokens], None),
            "total_tokens_mean": _mean([(c.get("in_tokens") or 0) + c["out_tokens"] + (c.get("cache_tokens") or 0)
                                        for c in with_tokens], None),
            "time_s_mean": _mean([c["duration_ms"] / 1000 for c in cells if c.get("duration_ms") is not None], 1),
        })
    return rows


def _cell(value, fmt="{}"):
    return "-" if value is None else fmt.format(value)


def table_lines(rows: list[dict]) -> list[str]:
    by_task_model: dict[tuple, list[dict]] = defaultdict(list)
    for row in rows:
        by_task_model[(row["task"], row["model"])].append(row)
    header = f"  {'arm':18} {'n':>3} {'wrote%':>7} {'correct':>8} {'safe':>6} {'LOC':>6} {'tokens':>8} {'$/run':>8} {'time_s':>7}"
    lines = []
    for (task, model), group in sorted(by_task_model.items()):
        lines.append(f"{task}  ({model})")
        lines.append(header)
        for row in sorted(group, key=lambda r: r["arm"]):
            lines.append(
                f"  {row['arm']:18} {row['n']:>3} {row['wrote_file_rate']:>7} {row['correct_rate']:>8} "
                f"{row['safe_rate']:>6} {_cell(row['total_loc_median']):>6} {_cell(row['total_tokens_mean']):>8} "
                f"{_cell(row['cost_mean'], '${:.4f}'):>8} {_cell(row['time_s_mean']):>7}"
            )
    return lines
