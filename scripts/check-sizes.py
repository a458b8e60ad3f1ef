#!/usr/bin/env python3
"""Fails on a source file over 500 lines (the library and C ABI, the tools, the tests, the benches, the Python shim and
the scripts), or a function under lib/ or capi/ over 80 (issue 27: each file readable in one sitting, functions that
fit on a screen), unless docs/ARCHITECTURE.md's "Size exceptions" table names it with the reason.

    scripts/check-sizes.py [ROOT]

A function is counted from the first line of its signature to its closing brace, inclusive: a '{' at namespace or
class scope whose statement has a parameter list opens one; braces in string and character literals, in comments and
in preprocessor lines do not count. An exception is a table row of ARCHITECTURE.md's "## Size exceptions" section whose first cell
is `FILE` (the whole file) or `FILE:FUNCTION`. Prints one line per violation (FILE:LINE: FUNCTION is N lines) and
exits 1 if there is any, 0 otherwise."""
import pathlib
import re
import sys

MAX_FILE_LINES = 500
MAX_FUNCTION_LINES = 80
SOURCES = ("lib", "capi")  # their functions too
FILE_ROOTS = SOURCES + ("tools", "tests", "bench", "python_shim", "scripts")
FILE_SUFFIXES = (".cpp", ".h", ".c", ".py", ".sh")
LITERAL = re.compile(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|(//.*$)')
CONTROL = re.compile(r'^\s*(if|for|while|switch|else|do|namespace|struct|class|enum|union|extern|return|case)\b')
NAME = re.compile(r'([\w:~]+)\s*\(')


def code_lines(text):
    """The lines with literals (raw strings too) and comments blanked, line numbers kept."""
    text = re.sub(r'R"([^(\s]*)\((.*?)\)\1"', lambda m: '""' + "\n" * m.group(0).count("\n"), text, flags=re.S)
    text = re.sub(r'/\*.*?\*/', lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    return [LITERAL.sub(lambda m: "" if m.group(1) else '""', line) for line in text.split("\n")]


def classify(statement, enclosing):
    """What a '{' opens, from the statement text before it: a namespace, a class, a function body or a block."""
    if enclosing in ("function", "block"):
        return "block"
    text = " ".join(statement.split())
    if text.startswith("namespace") or text.startswith('extern "C"') or text.startswith("extern"):
        return "namespace"
    if re.match(r'^(template\s*<.*>\s*)?(class|struct|union|enum)\b', text) and "(" not in text:
        return "class"
    if "(" in text and "=" not in text.split("(")[0] and not CONTROL.match(text):
        return "function"
    return "block"


def functions(lines):
    """(first line index, length, name) of every function definition, from its signature's first line to its
    closing brace."""
    stack, statement, first = [], "", None
    for i, line in enumerate(lines):
        if line.lstrip().startswith("#"):
            continue
        for ch in line:
            if ch == "{":
                kind = classify(statement, stack[-1][0] if stack else "namespace")
                stack.append((kind, first if first is not None else i, statement))
                statement, first = "", None
            elif ch == "}":
                if stack:
                    kind, start, text = stack.pop()
                    if kind == "function":
                        name = NAME.search(" ".join(text.split()))
                        yield start, i - start + 1, name.group(1) if name else text.strip()
                statement, first = "", None
            elif ch == ";":
                statement, first = "", None
            else:
                if first is None and not ch.isspace():
                    first = i
                statement += ch
        statement += " "


def read_exceptions(root):
    doc = (root / "docs" / "ARCHITECTURE.md").read_text().split("\n")
    exceptions, inside = set(), False
    for line in doc:
        if line.startswith("## "):
            inside = line.strip() == "## Size exceptions"
        elif inside and line.startswith("|"):
            cell = line.strip("|").split("|")[0].strip().strip("`")
            exceptions.add(cell)
    return exceptions


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent.parent)
    exceptions = read_exceptions(root)
    violations = []
    for top in FILE_ROOTS:
        for path in sorted((root / top).rglob("*")):
            if path.suffix not in FILE_SUFFIXES or not path.is_file():
                continue
            rel = path.relative_to(root).as_posix()
            lines = path.read_text(errors="replace").split("\n")
            if len(lines) - 1 > MAX_FILE_LINES and rel not in exceptions:
                violations.append(f"{rel}: {len(lines) - 1} lines (at most {MAX_FILE_LINES}): split it along a seam")
            if top not in SOURCES or path.suffix not in (".cpp", ".h", ".c"):
                continue
            for first, length, name in functions(code_lines("\n".join(lines))):
                if length > MAX_FUNCTION_LINES and f"{rel}:{name}" not in exceptions:
                    violations.append(f"{rel}:{first + 1}: {name} is {length} lines (at most {MAX_FUNCTION_LINES}): "
                                      "split it into named steps, or name it in ARCHITECTURE.md's Size exceptions")
    for v in violations:
        print(v)
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
