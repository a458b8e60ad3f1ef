// The hot-path form of a signature (SPEC section 3): a compact binary key of
// everything the canonical JSON depends on (op, stage, IValue tags, dtypes,
// sizes, strides, scalar bits, string bytes), appended to a reusable buffer
// and hashed with XXH3. Equal keys give equal canonical JSON; the recorder
// compares whole keys, so a hash collision can never merge two signatures.
#pragma once

#include "capture/torch_guard.h"

#include <ATen/core/ivalue.h>

#include <cstdint>
#include <string>

namespace lingprobe::capture {

void append_key(const c10::IValue& value, std::string& key);
void append_key_u64(uint64_t value, std::string& key);
uint64_t hash_key(const char* data, size_t size);

}  // namespace lingprobe::capture
