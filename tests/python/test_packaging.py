"""The C/C++ packaging a user links against (issue 28, item 7): an install to any prefix works with pkg-config and
with find_package, and the build tree itself is a find_package and a pkg-config package."""
import os
import pathlib
import subprocess
import textwrap

import pytest

PROGRAM = textwrap.dedent("""
    #include <stdio.h>
    #include <lingprobe/lingprobe.h>

    int main(void) {
      /* Linked and callable: the state before init, and a status's text. */
      printf("%d %s\\n", (int)lingprobe_get_state(), lingprobe_status_string(LINGPROBE_OK));
      return 0;
    }
""")

CMAKE_PROJECT = textwrap.dedent("""
    cmake_minimum_required(VERSION 3.16)
    project(uses_lingprobe C)
    find_package(lingprobe CONFIG REQUIRED)
    add_executable(prog prog.c)
    target_link_libraries(prog PRIVATE lingprobe::lingprobe)
""")


def run(args, **kw):
    p = subprocess.run(args, capture_output=True, text=True, timeout=300, **kw)
    assert p.returncode == 0, " ".join(map(str, args)) + "\n" + p.stdout + p.stderr
    return p


@pytest.fixture(scope="module")
def prefix(build_dir, tmp_path_factory):
    p = tmp_path_factory.mktemp("prefix") / "opt" / "lingprobe"
    run(["cmake", "--install", str(build_dir), "--prefix", str(p)])
    return p


def source(tmp_path):
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "prog.c").write_text(PROGRAM)
    (tmp_path / "CMakeLists.txt").write_text(CMAKE_PROJECT)
    return tmp_path


def libdir_of(prefix):
    (lib,) = {p.parent for p in prefix.glob("lib*/**/liblingprobe.so")}
    return lib


def test_pkg_config_from_an_installed_prefix(prefix, tmp_path):
    src = source(tmp_path)
    env = dict(os.environ, PKG_CONFIG_PATH=str(libdir_of(prefix) / "pkgconfig"))
    flags = run(["pkg-config", "--cflags", "--libs", "lingprobe"], env=env).stdout.split()
    assert any(f.startswith("-I") and pathlib.Path(f[2:]).resolve() == (prefix / "include").resolve() for f in flags)
    run(["cc", str(src / "prog.c"), "-o", str(tmp_path / "prog"), *flags])
    # found by the RPATH the .pc gives (a new user's binary failed with "cannot open shared object file")
    assert run([str(tmp_path / "prog")]).stdout == "0 ok\n"


def test_pkg_config_from_the_build_tree(build_dir, tmp_path):
    """PKG_CONFIG_PATH=build gave the installed .pc's paths relative to build/ (../../include: nothing there), and
    the header's version.h is generated under build/include: a new user's first compile failed."""
    src = source(tmp_path)
    env = dict(os.environ, PKG_CONFIG_PATH=str(build_dir))
    flags = run(["pkg-config", "--cflags", "--libs", "lingprobe"], env=env).stdout.split()
    run(["cc", str(src / "prog.c"), "-o", str(tmp_path / "prog"), *flags])
    assert run([str(tmp_path / "prog")]).stdout == "0 ok\n"  # found by its RPATH, no LD_LIBRARY_PATH


@pytest.mark.parametrize("where", ["installed prefix", "build tree"])
def test_find_package(where, prefix, build_dir, tmp_path):
    src = source(tmp_path / "src")
    hint = [f"-DCMAKE_PREFIX_PATH={prefix}"] if where == "installed prefix" else [f"-Dlingprobe_DIR={build_dir}"]
    run(["cmake", "-S", str(src), "-B", str(tmp_path / "b"), *hint])
    run(["cmake", "--build", str(tmp_path / "b")])
    lib = libdir_of(prefix) if where == "installed prefix" else build_dir
    out = run([str(tmp_path / "b" / "prog")], env=dict(os.environ, LD_LIBRARY_PATH=str(lib))).stdout
    assert out == "0 ok\n"
