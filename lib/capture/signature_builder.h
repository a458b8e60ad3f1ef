// Builds the structural signature of one operator call (SPEC section 3) from
// the operator's schema and the boxed inputs and outputs the dispatcher
// passes to a RecordFunction callback, exactly as a Python __torch_dispatch__
// handler sees them:
//  - positional args in schema order, a contiguous tail of args equal to
//    their schema default dropped; keyword-only args in "kwargs", omitted
//    when equal to their default (IValue equality: tag-strict, so 1 != 1.0);
//  - tensors as {"dtype","shape","stride"} without device; undefined -> null;
//    non-strided layouts get "stride": null; tensors whose sizes cannot be
//    read (nested, symbolic) get "shape": null and "stride": null;
//  - ScalarType / Layout / MemoryFormat args (typed by the schema) as
//    "torch.bfloat16" / "torch.strided" / "torch.contiguous_format";
//  - Device as its type only ("cuda"); SymInt as int when concrete;
//  - tuples and lists as arrays; dicts as objects (keys as strings);
//  - anything else (Generator, Stream, Object, ...) as the documented
//    fallback string "<Kind>" (e.g. "<Generator>"), never an exception.
// When the number of inputs does not match the schema (inputs unavailable or
// a schema mismatch) every input is written positionally, untrimmed.
#pragma once

#include "capture/torch_guard.h"

#include <ATen/core/function_schema.h>
#include <ATen/core/ivalue.h>

#include <string>

#include "format/json_value.h"

namespace lingprobe::capture {

// "aten::to" + "dtype" -> "aten.to.dtype"; an empty overload -> "default".
std::string dotted_op_name(const c10::OperatorName& name);

// Python's spelling of a dtype ("torch.bfloat16"), a layout ("torch.strided")
// and a memory format ("torch.channels_last"); nullptr for unknown values.
std::string python_dtype_name(c10::ScalarType type);
const char* python_layout_name(int64_t layout);
const char* python_memory_format_name(int64_t format);
// The schema's type says an int argument is a ScalarType / Layout / MemoryFormat.
bool type_is(const c10::TypePtr& type, c10::TypeKind kind);
// The element type of a (possibly optional) list type, or nullptr.
c10::TypePtr list_element_type(const c10::TypePtr& type);

// The parts, for the recorder, which sees inputs in the start callback and
// outputs in the end callback: {"args": [...], "kwargs": {...}} and the output.
// Scalar folding (LINGPROBE_FOLD_SCALARS): the arguments and returns of an op
// that are scalars (int, float, Scalar, SymInt, SymFloat; optional or not),
// whose int and float values a folded signature writes as their type ("<int>",
// "<float>"). Bit i: argument or return i (the first 64). int[] shapes, dtypes,
// layouts, bools and tensors are never folded.
struct ScalarFold {
  uint64_t arguments = 0, returns = 0;
};
ScalarFold scalar_fold_of(const c10::FunctionSchema& schema);

// `fold`: the positions written as their type (ScalarFold), 0 for none.
format::JsonValue build_arguments(const c10::FunctionSchema& schema, c10::ArrayRef<const c10::IValue> inputs,
                                  uint64_t fold = 0);
// An op with returns whose end came without outputs raised: torch sets a call's outputs only when it returns
// (its output is then format::raised_output()).
inline bool ended_without_outputs(const c10::FunctionSchema& schema, c10::ArrayRef<const c10::IValue> outputs) {
  return outputs.empty() && !schema.returns().empty();
}
format::JsonValue build_output(const c10::FunctionSchema& schema, c10::ArrayRef<const c10::IValue> outputs,
                               uint64_t fold = 0);
format::JsonValue assemble_signature(const std::string& dotted_op, const format::JsonValue& arguments,
                                     format::JsonValue output, const std::string& stage);

format::JsonValue build_signature(const c10::FunctionSchema& schema, c10::ArrayRef<const c10::IValue> inputs,
                                  c10::ArrayRef<const c10::IValue> outputs, const std::string& stage);

// Same, returning canonical text and its sha256 (the strings written to the
// metadata files).
struct CanonicalSignature {
  std::string json;
  std::string sha256;
};
CanonicalSignature canonical_signature(const c10::FunctionSchema& schema, c10::ArrayRef<const c10::IValue> inputs,
                                       c10::ArrayRef<const c10::IValue> outputs, const std::string& stage,
                                       const ScalarFold& fold = {});

}  // namespace lingprobe::capture
