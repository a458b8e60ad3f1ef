"""The layer table is enforced by a check, not by goodwill (issue 27): scripts/check-includes.py fails on an include
that crosses lib/layers.txt and on a component docs/ARCHITECTURE.md does not name, and ARCHITECTURE.md shows that
table as it is; scripts/check-sizes.py keeps files and functions readable; the project's own environment variables
are known to the library."""
import pathlib
import re
import shutil
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
CHECK = ROOT / "scripts" / "check-includes.py"


def run(root, check=CHECK):
    return subprocess.run([sys.executable, str(check), str(root)], capture_output=True, text=True, timeout=120)


def run_cli(build_dir, *args):
    return subprocess.run([str(build_dir / "lingprobe"), *args], capture_output=True, text=True, check=True,
                          timeout=60).stdout


def test_the_tree_keeps_the_table():
    p = run(ROOT)
    assert p.returncode == 0, p.stdout


def test_a_crossing_include_fails_with_its_file_and_line(tmp_path):
    for part in ("lib", "capi", "tools", "include", "docs"):
        shutil.copytree(ROOT / part, tmp_path / part)
    sink = tmp_path / "lib" / "sink" / "claims.cpp"
    sink.write_text('#include "capture/sampler.h"\n' + sink.read_text())  # sink may not know capture
    fmt = tmp_path / "lib" / "format" / "glob.cpp"
    fmt.write_text(fmt.read_text() + "\n#include <ATen/ATen.h>\n")  # format is torch-free
    p = run(tmp_path)
    assert p.returncode == 1, p.stdout
    assert 'lib/sink/claims.cpp:1: layer sink includes "capture/sampler.h" (layer capture); it may include format' \
        in p.stdout, p.stdout
    assert "lib/format/glob.cpp" in p.stdout and "<ATen/ATen.h>" in p.stdout
    assert "2 include(s) crossing" in p.stdout


def test_architecture_shows_the_table():
    table = [l for l in (ROOT / "lib" / "layers.txt").read_text().splitlines() if l and not l.startswith("#")]
    doc = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    assert "\n".join(table) in doc, "docs/ARCHITECTURE.md's layer table is stale: paste lib/layers.txt into it"


def test_a_file_the_picture_does_not_name_fails(tmp_path):
    for part in ("lib", "capi", "tools", "include", "docs"):
        shutil.copytree(ROOT / part, tmp_path / part)
    (tmp_path / "lib" / "gpu" / "new_room.cpp").write_text("// a component nobody drew\n")
    p = run(tmp_path)
    assert p.returncode == 1, p.stdout
    assert "lib/gpu/new_room: not named in docs/ARCHITECTURE.md" in p.stdout, p.stdout
    assert "0 include(s) crossing lib/layers.txt, 1 component(s) missing" in p.stdout, p.stdout


SIZES = ROOT / "scripts" / "check-sizes.py"


def test_the_tree_keeps_its_sizes():
    p = run(ROOT, SIZES)
    assert p.returncode == 0, p.stdout


def test_a_long_function_and_a_long_file_fail_unless_named(tmp_path):
    for part in ("lib", "capi", "docs"):
        shutil.copytree(ROOT / part, tmp_path / part)
    body = "".join(f"  x += {i};\n" for i in range(80))
    # a wrapped signature, a comment header and braces in literals and comments must not hide it
    (tmp_path / "lib" / "format" / "long_one.cpp").write_text(
        "// a header comment {\nnamespace lingprobe::format {\n\nint long_one(int a,\n"
        "             int b) {\n  int x = '{';\n  const char* s = \"}}\";  // }\n" + body + "  return x;\n}\n\n"
        "int short_one() { return 1; }\n\n}  // namespace lingprobe::format\n")
    (tmp_path / "lib" / "format" / "long_file.h").write_text("// a long header\n" + "// line\n" * 500)
    p = run(tmp_path, SIZES)
    assert p.returncode == 1, p.stdout
    assert "lib/format/long_one.cpp:4: long_one is 86 lines (at most 80)" in p.stdout, p.stdout
    assert "short_one" not in p.stdout
    assert "lib/format/long_file.h: 501 lines (at most 500)" in p.stdout, p.stdout
    doc = tmp_path / "docs" / "ARCHITECTURE.md"
    doc.write_text(doc.read_text().replace(
        "| where | lines | why it stays whole |\n|---|---|---|\n",
        "| where | lines | why it stays whole |\n|---|---|---|\n| `lib/format/long_one.cpp:long_one` | 86 | a test |\n"
        "| `lib/format/long_file.h` | 501 | a test |\n"))
    p = run(tmp_path, SIZES)
    assert p.returncode == 0, p.stdout


def test_a_long_test_or_script_file_fails_too(tmp_path):
    # Test files of 551 to 614 lines went unnoticed: the check read lib/ and capi/ only.
    for part in ("lib", "capi", "docs"):
        shutil.copytree(ROOT / part, tmp_path / part)
    (tmp_path / "tests" / "python").mkdir(parents=True)
    (tmp_path / "tests" / "python" / "test_long.py").write_text("x = 1\n" * 501)
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "short.py").write_text("def f():\n" + "    pass\n" * 100)  # no function rule outside lib/
    p = run(tmp_path, SIZES)
    assert p.returncode == 1 and p.stdout.strip() == "tests/python/test_long.py: 501 lines (at most 500): split it " \
        "along a seam", p.stdout


# A variable read from the environment: ${LINGPROBE_X} or $LINGPROBE_X in a shell script, os.environ / getenv in
# Python and C, $ENV{LINGPROBE_X} in CMake (whose plain ${LINGPROBE_X} is a CMake variable, not the environment).
ENV_READ = {"shell": re.compile(r'\$\{?LINGPROBE_([A-Z0-9_]+)'),
            "code": re.compile(r'(?:environ\.get\(\s*["\']|environ\[\s*["\']|getenv\(\s*["\'])LINGPROBE_([A-Z0-9_]+)'),
            "cmake": re.compile(r'\$ENV\{LINGPROBE_([A-Z0-9_]+)')}


def test_every_variable_the_projects_scripts_read_is_an_option_or_named_as_none(build_dir):
    # scripts/test.sh documents LINGPROBE_FUZZ_SECONDS; a developer who exported it was told by every recording
    # process that it "is not a lingprobe option". The library keeps a list of the LINGPROBE_* names that are not
    # options (lib/api/config.cpp); every name the project's own files read from the environment is on it or is one.
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    read = {}
    for rel in tracked:
        kind = ("shell" if rel.endswith(".sh") or rel == ".ci/run" else
                "cmake" if rel.endswith((".cmake", "CMakeLists.txt")) else
                "code" if rel.endswith((".py", ".c", ".cpp", ".h")) else None)
        if kind is None or rel.startswith("tests/"):  # the tests set options; they read none of their own
            continue
        for name in ENV_READ[kind].findall((ROOT / rel).read_text(errors="replace")):
            read.setdefault(name, rel)
    options = set(re.findall(r"LINGPROBE_([A-Z0-9_]+)", run_cli(build_dir, "config")))
    source = (ROOT / "lib" / "api" / "config.cpp").read_text()
    listed = source[source.index("kNonOptionVariables[] = {"):]
    not_options = set(re.findall(r'"([A-Z0-9_]+)"', listed[:listed.index("};")]))
    assert "FUZZ_SECONDS" in read and "OUT" in options  # the scan sees what it must
    unnamed = {f"LINGPROBE_{n} ({rel})" for n, rel in read.items() if n not in options | not_options}
    assert not unnamed, f"read from the environment, neither an option nor in kNonOptionVariables: {sorted(unnamed)}"
