#!/usr/bin/env python3
"""Fails on an #include that crosses the layer table (lib/layers.txt), as Perfetto's check_include_violations does.

    scripts/check-includes.py [ROOT]

Every quoted include of a source file under a layer's directories must name a file of its own layer or of a layer
the table allows ("format/json_value.h" is layer format; "lingprobe/lingprobe.h" is the public headers); a layer
without torch headers may not include <torch/...>, <ATen/...> or <c10/...>. And every component (a file pair, or a
lone header) of a layer's directories must be named in docs/ARCHITECTURE.md's picture, in backquotes (`recorder`,
`torch_guard.h`, `capi/lingprobe_capi.cpp`), so that the picture cannot leave a room out. Prints one line per
violation (FILE:LINE: what crosses, and what the table allows; FILE: not in the picture) and exits 1 if there is any,
0 otherwise."""
import pathlib
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')
TORCH = ("torch/", "ATen/", "c10/")
PREFIX = {"lingprobe": "public"}  # the first path part of an include -> its layer, where the two differ


def read_table(root):
    layers = {}
    for line in (root / "lib" / "layers.txt").read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        name, dirs, *rest = line.split()
        allowed, torch = rest[:-1], rest[-1]
        layers[name] = {"dirs": dirs.split(","), "allowed": {a for a in allowed if a != "-"}, "torch": torch == "yes"}
    return layers


def layer_of_file(path, layers, root):
    rel = path.relative_to(root).as_posix()
    for name, layer in layers.items():
        if any(rel.startswith(d + "/") for d in layer["dirs"]):
            return name
    return None


def violations(root):
    layers = read_table(root)
    out = []
    for path in sorted(p for p in root.rglob("*") if p.suffix in (".h", ".cpp", ".c") and p.is_file()):
        own = layer_of_file(path, layers, root)
        if own is None:
            continue
        rule = layers[own]
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            quote, target = m.groups()
            rel = path.relative_to(root).as_posix()
            if quote == "<":
                if not rule["torch"] and target.startswith(TORCH):
                    out.append(f"{rel}:{n}: layer {own} includes a torch header <{target}> (it is torch-free)")
                continue
            first = target.split("/")[0]
            dest = PREFIX.get(first, first) if "/" in target else own
            if dest not in layers:
                continue  # a header beside the file, or a generated one
            if dest != own and dest not in rule["allowed"]:
                allowed = ", ".join(sorted(rule["allowed"])) or "nothing"
                out.append(f"{rel}:{n}: layer {own} includes \"{target}\" (layer {dest}); it may include {allowed}")
    return out


def unnamed_components(root):
    """Files of a layer whose component docs/ARCHITECTURE.md does not name."""
    layers = read_table(root)
    picture = (root / "docs" / "ARCHITECTURE.md").read_text()
    out = []
    for layer in layers.values():
        for d in layer["dirs"]:
            stems = sorted({p.stem for p in (root / d).glob("*") if p.suffix in (".h", ".cpp", ".c")})
            for stem in stems:
                if not re.search(r"`(?:[\w/]*/)?" + re.escape(stem) + r"(?:\.h|\.cpp|\.c)?`", picture):
                    out.append(f"{d}/{stem}: not named in docs/ARCHITECTURE.md (add it, in backquotes, to its layer's row)")
    return out


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parents[1])
    found = violations(root)
    unnamed = unnamed_components(root)
    for v in found + unnamed:
        print(v)
    print(f"check-includes: {len(found)} include(s) crossing lib/layers.txt, {len(unnamed)} component(s) missing from "
          "docs/ARCHITECTURE.md")
    return 1 if found or unnamed else 0


if __name__ == "__main__":
    sys.exit(main())
