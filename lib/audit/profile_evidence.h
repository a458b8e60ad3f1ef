// Reading a profile directory's kernels (profiles/{stem}/kernels.json, the
// seed's units), shared by the coverage audit and the capability report.
#pragma once

#include <optional>
#include <string>

#include "audit/metadata_reader.h"
#include "format/json_value.h"

namespace lingprobe::audit {

// A record's evidence path stays inside the run directory (relative, no "..").
bool evidence_path_inside(const std::string& path);

// A kernel's metric in base units (seconds, bytes), whatever prefix its unit
// carries ("ns", "us", "ms", "s", "usecond", "byte", "Kbyte", "Mbyte", ...);
// `unit_if_absent` is assumed where the metric has no unit. nullopt where the
// metric, its value or a known unit is missing.
std::optional<double> kernel_metric_si(const format::JsonValue& kernel, const char* name,
                                       const char* unit_if_absent = "");

// Kernel time of the profiled call (µs): the sum of gpu__time_duration.sum
// over `kernels` (an array, or an object holding "kernels"); nullopt where
// there is no kernel or one has no time.
std::optional<double> kernels_time_us(const format::JsonValue& kernels);

// A timed call's kernels (a kernel_timing record) where it passed and has a kernel time: the one rule the coverage
// audit and the capability report share (a signature's first such record is its time); nullopt otherwise.
std::optional<format::JsonValue> timed_kernels(const KernelTiming& timing);

// Kernel time (µs) of the dtype-converting copies among `kernels` (ATen's
// *_copy_kernel_cuda: bfloat16_copy_kernel_cuda, direct_copy_kernel_cuda,
// ...). Inside an autocast region these are the casts of an op's inputs,
// which its window measures with the op's own kernels.
double copy_kernels_time_us(const format::JsonValue& kernels);

// Two profiles' kernels.json side by side, kernel by kernel in launch order:
// {"kernels_a": n, "kernels_b": n, "kernels": [{index, name_a, name_b, metrics:
// {name: {a, b, change_relative, unit}}}]}; null when either has no kernel list.
format::JsonValue kernel_metric_changes(const format::JsonValue& kernels_a, const format::JsonValue& kernels_b);

}  // namespace lingprobe::audit
