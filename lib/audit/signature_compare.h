// Two signatures compared for `lingprobe diff` (run_diff): the key under
// which signatures that changed only in shapes pair up (same stage, op,
// dtypes, tensor ranks, list lengths, scalars and weight/bias shapes), their
// shapes in order, the key under which signatures that changed only in dtypes
// pair up, the signature without strides, and where two differ.
// Pure functions of the signature JSON; no files, no torch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "format/json_value.h"

namespace lingprobe::audit {

// A tensor's JSON in a signature: an object with a shape and a dtype.
bool is_tensor(const format::JsonValue& v);

// The pairing key: equal for two signatures of one layer at different input sizes.
std::string pairing_key(const format::JsonValue& signature, const std::string& stage, const std::string& op);

// The retyping key: equal for two signatures identical but for their tensors' dtypes (a run and its autocast twin).
std::string retyping_key(const format::JsonValue& signature, const std::string& stage, const std::string& op);

// Every tensor's shape (arguments, keyword arguments, then output), one after another, -2 between tensors.
std::vector<int64_t> signature_shapes(const format::JsonValue& signature);

// The signature with every tensor's stride left out.
format::JsonValue without_strides(const format::JsonValue& v);

// Where two signatures differ ("args[0].shape: [1,4680,5120] -> [1,2640,5120]"), at most 12 lines into `out`.
void differences(const format::JsonValue& a, const format::JsonValue& b, const std::string& path,
                 std::vector<std::string>& out);

}  // namespace lingprobe::audit
