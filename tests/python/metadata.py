"""Reads lingprobe metadata JSONL files the way an auditor must: line by line,
tolerating a truncated last line; checks every record's invariants."""
import hashlib
import json
import pathlib


def stream(path):
    """The file's records one by one (a killed run's files hold up to a million)."""
    with open(path, "rb") as f:
        lines = f.read().split(b"\n")
    for i, line in enumerate(lines):
        if not line:
            continue
        try:
            yield json.loads(line)
        except ValueError:
            assert i == len(lines) - 1, f"{path}:{i + 1}: malformed line that is not the last"


def read(path):
    return list(stream(path))


def summarize(path):
    """Returns header, {id: signature dict}, {id: calls from the last counts}, call records, last counts."""
    records = read(path)
    header = records[0]
    assert header["kind"] == "header" and header["format"] == "lingprobe.metadata/1"
    sigs, counts, calls = {}, {}, []
    last = None
    for r in records[1:]:
        if r["kind"] == "signature":
            text = r["signature_json"]
            assert hashlib.sha256(text.encode()).hexdigest() == r["sha256"]
            assert json.dumps(json.loads(text), sort_keys=True, separators=(",", ":")) == text
            sigs[r["id"]] = json.loads(text)
        elif r["kind"] == "call":
            assert r["id"] in sigs, "call record before its signature"
            assert r["t1_ns"] >= r["t0_ns"]
            calls.append(r)
        elif r["kind"] == "counts":
            last = r
    assert last is not None, "no counts record"
    counts = {int(k): v for k, v in last["calls"].items()}
    return header, sigs, counts, calls, last


def run_dirs(out):
    """The launches' run directories OUT/{run_id} under an output root (not the latest link)."""
    out = pathlib.Path(out)
    if not out.is_dir():
        return []
    return sorted(p for p in out.iterdir() if p.is_dir() and not p.is_symlink() and (p / "metadata").is_dir())


def files(out):
    """Metadata files of a run directory, or of the one launch under an output root ([] if none)."""
    out = pathlib.Path(out)
    if (out / "metadata").is_dir():
        return sorted((out / "metadata").glob("*.jsonl"))
    dirs = run_dirs(out)
    assert len(dirs) <= 1, f"several launches under {out}: {dirs}"
    return sorted((dirs[0] / "metadata").glob("*.jsonl")) if dirs else []


def warning_codes(stderr):
    """The codes of a lingprobe command's warnings, in order: its lines "lingprobe TOOL: warning: MESSAGE [CODE]"
    (the codes are docs/AUDIT.md's; a test switches on them, never on a message's words)."""
    lines = [line for line in stderr.splitlines() if line.startswith("lingprobe ") and ": warning: " in line]
    assert all(line.endswith("]") and " [" in line for line in lines), f"a warning without its code: {lines}"
    return [line.rsplit(" [", 1)[1][:-1] for line in lines]


def report_warning_codes(report):
    """The codes of a report's "warnings" (coverage_audit.json, capability_report.json), in order."""
    return [w["code"] for w in report["warnings"]]
