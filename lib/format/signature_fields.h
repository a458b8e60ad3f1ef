// What a signature's JSON (SPEC section 3: args, kwargs, op, output, stage)
// says beyond its text: the sampler's input key, the bytes its tensors
// would take in a snapshot, and whether the call raised. Pure functions,
// shared by capture and the audit.
#pragma once

#include <cstdint>
#include <string>

#include "format/json_value.h"

namespace lingprobe::format {

// The sampler's key of a signature: the SHA-256 of its canonical JSON
// without "output" ({"args","kwargs","op","stage"}), as the recorder hashes
// a call's inputs.
std::string input_key_sha256(const JsonValue& signature);

// Stored bytes of every tensor the signature names, inputs and output (a
// non-overlapping view compactly, an overlapping one as the span it covers:
// what its snapshot holds). Unknown dtypes count 0.
uint64_t signature_tensor_bytes(const JsonValue& signature);

// The output of a call that raised: {"raised":true}. An op with returns whose
// end came without outputs raised (torch sets a call's outputs only when it
// returns); the call did no work its signature could describe.
JsonValue raised_output();
bool call_raised(const JsonValue& signature);

}  // namespace lingprobe::format
