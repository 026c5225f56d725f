"""The bench's tables: one row per side with median, spread, ratio against the peer and
peak memory, and the PPO step phase by phase. Plain text, so it pastes into Markdown.
"""

from __future__ import annotations

from typing import Any

from stats import speedup, summarize


def _table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    line = lambda cells: "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths)) + " |"
    rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(header), rule, *(line(r) for r in rows)])


def _versus(factor: float) -> str:
    return f"{factor:.2f}x faster" if factor >= 1 else f"{1 / factor:.2f}x slower"


def summarize_case(case: Any, runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Medians and spreads per side, and each side against the reference (the peer)."""
    sides: dict[str, Any] = {}
    for side in case.sides:
        ok = [r for r in runs.get(side.name, []) if r.get("error") is None]
        entry: dict[str, Any] = {"runs": len(runs.get(side.name, [])), "failed": len(runs.get(side.name, [])) - len(ok)}
        if ok:
            metric = summarize([r["metric"] for r in ok])
            rss = summarize([r["peak_rss_bytes"] for r in ok])
            entry.update(metric=metric.__dict__, peak_rss_bytes=rss.__dict__)
            cuda = [r["result"].get("cuda_peak_bytes") for r in ok if r.get("result", {}).get("cuda_peak_bytes")]
            if cuda:
                entry["cuda_peak_bytes"] = summarize(cuda).__dict__
        sides[side.name] = entry
    ref = case.reference
    if ref is not None and "metric" in sides.get(ref.name, {}):
        for side in case.sides:
            entry = sides[side.name]
            if side is ref or "metric" not in entry:
                continue
            entry["speedup"] = speedup(entry["metric"]["median"], sides[ref.name]["metric"]["median"], case.higher_is_better)
            memory = "cuda_peak_bytes" if "cuda_peak_bytes" in entry and "cuda_peak_bytes" in sides[ref.name] else "peak_rss_bytes"
            entry["memory_ratio"] = entry[memory]["median"] / sides[ref.name][memory]["median"]
    return sides


def case_table(case: Any, sides: dict[str, Any]) -> str:
    header = ["side", f"median {case.unit}", "spread (min-max)", "n", "vs peer", "peak memory GB", "memory vs peer"]
    rows = []
    for side in case.sides:
        entry = sides[side.name]
        if "metric" not in entry:
            rows.append([side.name, "failed", "", f"0/{entry['runs']}", "", "", ""])
            continue
        m = entry["metric"]
        digits = 1 if m["median"] >= 100 else 3 if m["median"] < 1 else 2
        memory = entry.get("cuda_peak_bytes", entry["peak_rss_bytes"])
        rows.append([
            side.name + (" (peer)" if side.reference else ""),
            f"{m['median']:.{digits}f}",
            f"{m['low']:.{digits}f}-{m['high']:.{digits}f}",
            f"{m['n']}/{entry['runs']}",
            _versus(entry["speedup"]) if "speedup" in entry else "",
            f"{memory['median'] / 1e9:.2f}" + (" (GPU)" if "cuda_peak_bytes" in entry else ""),
            f"{entry['memory_ratio']:.2f}x" if "memory_ratio" in entry else "",
        ])
    text = f"{case.name}: {case.title}\n" + _table(header, rows)
    return text + (f"\n  {case.note}" if case.note else "")


def phase_table(case: Any, runs: dict[str, list[dict[str, Any]]]) -> str:
    """Median seconds per phase and side (workers report ``phases``)."""
    names = [s.name for s in case.sides if any("phases" in r.get("result", {}) for r in runs.get(s.name, []))]
    if not names:
        return ""
    medians: dict[str, dict[str, float]] = {}
    for name in names:
        results = [r["result"] for r in runs[name] if r.get("error") is None]
        keys = {k for res in results for k in res["phases"]}
        medians[name] = {k: summarize([res["phases"].get(k, 0.0) for res in results]).median for k in keys}
    phases = sorted({k for m in medians.values() for k in m})
    rows = [[phase, *(f"{medians[n][phase]:.2f}" if phase in medians[n] else "-" for n in names)] for phase in phases]
    rows.append(["sum of medians", *(f"{sum(medians[n].values()):.2f}" for n in names)])
    return f"{case.name}: median seconds per phase\n" + _table(["phase", *names], rows)


def extra_table(case: Any, runs: dict[str, list[dict[str, Any]]]) -> str:
    """Median (min-max) per side of the case's ``extra`` result keys (wall time, evaluation's
    share, optimality ...); a key no side reported is left out."""
    keys = [k for k in getattr(case, "extra", ()) if any(k in r.get("result", {}) for rs in runs.values() for r in rs)]
    if not keys:
        return ""
    names = [s.name for s in case.sides]
    rows = []
    for key in keys:
        row = [key]
        for name in names:
            values = [r["result"][key] for r in runs.get(name, []) if r.get("error") is None and key in r.get("result", {})]
            if not values:
                row.append("-")
                continue
            s = summarize(values)
            digits = 0 if key == "steps" else 3 if s.median < 10 else 1
            row.append(f"{s.median:.{digits}f}" + (f" ({s.low:.{digits}f}-{s.high:.{digits}f})" if s.n > 1 else ""))
        rows.append(row)
    return f"{case.name}: medians (min-max) per side\n" + _table(["figure", *names], rows)
