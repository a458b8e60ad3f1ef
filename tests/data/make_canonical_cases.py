"""Regenerates canonical_cases.jsonl: JSON inputs and the canonical text
Python gives them (json.dumps(json.loads(x), sort_keys=True,
separators=(",", ":"))), the reference lingprobe's C++ writer must match.
Run: python3 tests/data/make_canonical_cases.py > tests/data/canonical_cases.jsonl"""
import hashlib
import json

CASES = [
    r'{"b":1,"a":[1.0,2,-0.0,1e400,-1e400,NaN,Infinity,-Infinity]}',
    r'{"z": "h\u00e9llo \ud83d\ude00 \u007f\t\n\u0001 \"q\" \\ \/"}',
    r'{"k":{"y":null,"x":true,"\u00e9":false,"B":1,"a":{"d":[],"c":{}}}}',
    r'{"big":123456789012345678901234567890,"neg":-0,"e":1E5,"f":1.5e-7,"g":-12345678901234567890}',
    r'{"lone":"\udc00x\ud800","pair":"\ud83d\ude00"}',
    r'{"dup":1,"dup":2}',
    '{"s":"caf\u00e9 \u4e2d \U0001f600"}',
    '{ "a" : [ ] ,\t"b" : { } }\r',
    r'{"f":[0.1,1e-06,1e16,1e+16,5e-324,123456789.0,1e15,0.0001,0.00001,2.5E-05,1e22]}',
    r'{"i":[0,-1,9223372036854775807,-9223372036854775808,9223372036854775808]}',
    r'{"ctl":"\u0000\u001f\b\f\r"}',
    r'{"op":"aten.masked_fill.Scalar","args":[null,-Infinity],"kwargs":{},"output":null,"stage":"dit"}',
]

for text in CASES:
    canonical = json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))
    print(json.dumps({"input": text, "canonical": canonical,
                      "sha256": hashlib.sha256(canonical.encode()).hexdigest()}))
