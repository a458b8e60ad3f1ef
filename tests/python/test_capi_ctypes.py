"""Tier 2: the C ABI over ctypes, the same calls the C test makes."""
import ctypes
import hashlib
import json

import pytest


@pytest.fixture(scope="module")
def lib(build_dir):
    lib = ctypes.CDLL(str(build_dir / "liblingprobe.so"))
    lib.lingprobe_status_string.restype = ctypes.c_char_p
    lib.lingprobe_status_string.argtypes = [ctypes.c_int]
    lib.lingprobe_version.restype = ctypes.c_char_p
    lib.lingprobe_hash_signature.restype = ctypes.c_int
    lib.lingprobe_hash_signature.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t]
    return lib


def test_every_status_has_a_distinct_string(lib):
    texts = [lib.lingprobe_status_string(i) for i in range(13)]
    assert all(texts) and len(set(texts)) == len(texts)
    assert lib.lingprobe_status_string(13) == b"unknown lingprobe status"


def test_hash_signature_matches_python(lib, seed_audit):
    out = ctypes.create_string_buffer(65)
    for row in seed_audit["rows"][:5]:
        text = json.dumps(row["signature"]).encode()
        assert lib.lingprobe_hash_signature(text, len(text), out, 65) == 0
        assert out.value.decode() == row["signature_sha256"]
    text = b'{"x": NaN}'
    assert lib.lingprobe_hash_signature(text, len(text), out, 65) == 0
    assert out.value.decode() == hashlib.sha256(b'{"x":NaN}').hexdigest()
    assert lib.lingprobe_hash_signature(b"[]", 2, out, 65) == 10  # LINGPROBE_ERROR_PARSE


def test_library_exports_only_the_c_abi(build_dir):
    # Regression (H200, torch 2.11): liblingprobe.so exported std:: template
    # instantiations; loaded RTLD_GLOBAL by the preload stub, cuDNN's engine
    # library bound to them and crashed in the first conv3d.
    import subprocess
    out = subprocess.run(["nm", "-D", "--defined-only", str(build_dir / "liblingprobe.so")],
                         capture_output=True, text=True, check=True).stdout
    names = [line.split()[-1] for line in out.splitlines() if line.strip()]
    assert names and all(n.startswith("lingprobe_") for n in names), [n for n in names if not n.startswith("lingprobe_")][:10]
