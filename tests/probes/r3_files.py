"""Round 3, files: a run never writes into another run's folder, never deletes what it did not
write, and `rlkit report` writes only inside the run folder."""

from __future__ import annotations

import os
from pathlib import Path

from r3_common import check, raises, write


def finished_run(root: Path, steps=(2, 4)) -> Path:
    """A run folder as rlkit leaves it: marked checkpoints, logs."""
    for step in steps:
        ckpt = root / f"checkpoint_{step}"
        write(ckpt / ".rlkit-written", "written by rlkit\n")
        write(ckpt / "COMPLETE", "ok\n")
        write(ckpt / "config.yml", "train: {}\n")
    write(root / "logs" / "metrics.jsonl", '{"step": 1, "kind": "train", "time": 1.0, "loss": 1.0}\n')
    write(root / "logs" / "samples.jsonl", '{"step": 0, "samples": []}\n')
    return root


def claim(root, **kw):
    from rlkit_methods.run.rundir import claim as claim_

    kw.setdefault("resume", False)
    kw.setdefault("overwrite", False)
    handle = claim_(root, is_main_process=True, **kw)
    handle.release()
    return handle


def cases(tmp: Path) -> list[tuple[str, object]]:
    probes: list[tuple[str, object]] = []

    def add(name, probe):
        probes.append((name, probe))

    def writes_into_other_run(name, checkpoint_dir, **kw):
        def probe():
            try:
                claim(checkpoint_dir, **kw)
            except Exception as exc:  # noqa: BLE001
                text = str(exc)
                ok = "another run" in text and len(text.splitlines()) == 1
                return ("clear" if ok else "unclear"), text[:200]
            return "data-lost", "claimed: the run would write into another run's files"
        add(name, probe)

    a, b = finished_run(tmp / "A"), finished_run(tmp / "B")
    # issue 32: resuming A with checkpoint_dir B (finished) replaced B's checkpoint_4 and metrics
    writes_into_other_run("resume A into finished B's checkpoint_dir", b, resume=str(a / "checkpoint_4"))
    writes_into_other_run("resume A (run folder) into finished B", b, resume=str(a))
    writes_into_other_run("resume A, logging_dir = finished B's logs", tmp / "fresh1", resume=str(a / "checkpoint_4"), logging_dir=b / "logs")
    writes_into_other_run("new run, logging_dir = finished B's logs", tmp / "fresh2", logging_dir=b / "logs")
    writes_into_other_run("resume A in A, logging_dir = B's logs", a, resume=str(a / "checkpoint_4"), logging_dir=b / "logs")
    writes_into_other_run("new run with checkpoint_dir inside B's checkpoint", b / "checkpoint_4", resume=False)
    writes_into_other_run("resume A with checkpoint_dir = A's checkpoint_4", a / "checkpoint_4", resume=str(a / "checkpoint_4"))

    def allowed(name, checkpoint_dir, **kw):
        def probe():
            claim(checkpoint_dir, **kw)
        add(name, check(probe))

    allowed("resume A in its own folder", a, resume=str(a / "checkpoint_4"))
    allowed("resume A (run folder) in its own folder", a, resume=str(a))
    allowed("resume A into a new empty folder", tmp / "fresh3", resume=str(a / "checkpoint_4"))
    allowed("resume A, checkpoint_dir given with a trailing ./", Path(str(a) + "/."), resume=str(a / "checkpoint_4"))

    # overwrite: only what rlkit wrote goes
    def overwrite_keeps(name, build, kept, gone=()):
        def probe():
            root = tmp / name.replace(" ", "_")
            build(root)
            try:
                claim(root, overwrite=True)
            except Exception as exc:  # noqa: BLE001
                return "unclear", f"{type(exc).__name__}: {str(exc)[:200]}"
            lost = [k for k in kept if not (root / k).exists() and not Path(k).is_absolute() or Path(k).is_absolute() and not Path(k).exists()]
            if lost:
                return "data-lost", f"deleted {lost}"
            left = [g for g in gone if (root / g).exists()]
            if left:
                return "silent-wrong", f"kept the old run's {left}"
        add(name, check(probe))

    overwrite_keeps("overwrite keeps user files in checkpoint_99 (no marker)",
                    lambda r: write(r / "checkpoint_99" / "mine.txt", "user data"), ["checkpoint_99/mine.txt"])
    overwrite_keeps("overwrite keeps user files in hf_model (no marker)",
                    lambda r: write(r / "hf_model" / "weights.bin", "user data"), ["hf_model/weights.bin"])
    overwrite_keeps("overwrite keeps best_checkpoint without a marker",
                    lambda r: write(r / "best_checkpoint" / "mine.txt", "x"), ["best_checkpoint/mine.txt"])
    overwrite_keeps("overwrite keeps notes.txt beside the run", lambda r: (finished_run(r), write(r / "notes.txt", "x")),
                    ["notes.txt"], ["checkpoint_4"])
    overwrite_keeps("overwrite keeps checkpoint_abc", lambda r: (finished_run(r), write(r / "checkpoint_abc" / "x", "x")),
                    ["checkpoint_abc/x"], ["checkpoint_2"])
    overwrite_keeps("overwrite keeps a user file in logs/", lambda r: (finished_run(r), write(r / "logs" / "mine.txt", "x")),
                    ["logs/mine.txt"], ["logs/metrics.jsonl"])
    overwrite_keeps("overwrite removes rlkit's checkpoints", finished_run, [], ["checkpoint_2", "checkpoint_4"])
    overwrite_keeps("overwrite removes an rlkit hf_model", lambda r: write(r / "hf_model" / ".rlkit-written", "x"), [], ["hf_model"])

    def symlinked_checkpoint():
        root, target = tmp / "sym" / "run", finished_run(tmp / "sym" / "elsewhere")
        root.mkdir(parents=True)
        os.symlink(target / "checkpoint_4", root / "checkpoint_3")
        try:
            claim(root, overwrite=True)
        except Exception as exc:  # noqa: BLE001
            text = str(exc)
            outcome = "clear" if "checkpoint_3" in text and "link" in text and len(text.splitlines()) == 1 else "unclear"
            return (outcome if (target / "checkpoint_4" / "config.yml").exists() else "data-lost"), text[:200]
        if not (target / "checkpoint_4" / "config.yml").exists():
            return "data-lost", "deleted the linked folder's files"
    add("overwrite over a symlinked checkpoint", check(symlinked_checkpoint))

    def report_through_symlink():
        from rlkit_methods.run.end_report import report

        root = finished_run(tmp / "rep")
        victim = write(tmp / "victim.txt", "precious")
        os.symlink(victim, root / "report.png")
        try:
            report(root / "logs", checkpoint_dir=root)
        except Exception as exc:  # noqa: BLE001
            return ("clear" if "report.png" in str(exc) else "unclear"), str(exc)[:200]
        if victim.read_bytes() != b"precious":
            return "data-lost", "rlkit report wrote through report.png's symlink"
    add("rlkit report with report.png a symlink", check(report_through_symlink))

    def report_png_directory():
        from rlkit_methods.run.end_report import report

        root = finished_run(tmp / "rep2")
        (root / "report.png").mkdir()
        info = report(root / "logs", checkpoint_dir=root)
        return None if "not drawn" in str(info.get("plot")) else ("silent-wrong", str(info.get("plot")))
    add("rlkit report with report.png a folder", check(report_png_directory))

    add("checkpoint_dir is a file", raises(lambda: claim(write(tmp / "afile", "x")), "train.checkpoint_dir"))
    return probes
