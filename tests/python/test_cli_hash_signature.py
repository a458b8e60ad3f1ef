"""`lingprobe hash-signature` as a user runs it: a pipe in, hashes out."""
import hashlib
import json
import random
import subprocess


def run(cli, text):
    return subprocess.run([cli, "hash-signature"], input=text.encode(), capture_output=True)


def test_seed_signatures_in_shuffled_key_order(cli, seed_audit):
    rng = random.Random(7)
    lines = []
    for row in seed_audit["rows"]:
        sig = row["signature"]
        keys = list(sig)
        rng.shuffle(keys)
        lines.append(json.dumps({k: sig[k] for k in keys}, indent=None, separators=(", ", ": ")))
    proc = run(cli, "\n".join(lines) + "\n")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.decode().split() == [r["signature_sha256"] for r in seed_audit["rows"]]


def test_matches_python_on_awkward_values(cli):
    objs = [
        {"f": [0.1, 1e-06, 1e16, 5e-324, -0.0, float("inf"), float("-inf")], "s": "h\u00e9 \U0001f600 \t"},
        {"nested": {"z": [None, True, False], "a": {"b": 12345678901234567890123}}},
    ]
    text = "\n".join(json.dumps(o) for o in objs)
    proc = run(cli, text)  # no trailing newline on the last line
    assert proc.returncode == 0, proc.stderr
    expected = [hashlib.sha256(json.dumps(o, sort_keys=True, separators=(",", ":")).encode()).hexdigest() for o in objs]
    assert proc.stdout.decode().split() == expected


def test_stops_at_first_malformed_line(cli):
    proc = run(cli, '{"a":1}\n{"a":2}\n{"a" 3}\n{"a":4}\n')
    assert proc.returncode == 2
    assert len(proc.stdout.decode().split()) == 2
    assert "line 3" in proc.stderr.decode()


def test_unknown_command_and_help(cli):
    bad = subprocess.run([cli, "frobnicate"], capture_output=True)
    assert bad.returncode == 2 and b"unknown command" in bad.stderr
    ok = subprocess.run([cli, "--help"], capture_output=True)
    assert ok.returncode == 0 and b"hash-signature" in ok.stdout


def test_the_usage_docs_show_the_current_configuration_table(cli):
    # docs/USAGE.md quotes `lingprobe config`; an option added without the docs fails here
    import pathlib
    doc = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "USAGE.md").read_text()
    table = subprocess.run([cli, "config"], capture_output=True, text=True, check=True).stdout
    assert table in doc, "docs/USAGE.md's configuration table is stale: paste `lingprobe config` into it"
