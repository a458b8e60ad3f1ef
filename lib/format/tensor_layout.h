// Arithmetic of strided tensor layouts (no torch): how many storage elements
// a view spans, whether its elements overlap, the alignment of a pointer.
// Snapshots store a non-overlapping view compactly (its elements in order)
// and an overlapping one (stride 0, expand) as the storage span it covers,
// and replay rebuilds the exact shape, strides, storage offset and pointer
// alignment from these (SPEC section 4).
#pragma once

#include <cstdint>
#include <vector>

namespace lingprobe::format {

// Both return -1 when the result overflows int64 (or a size or stride is negative).
int64_t numel_of(const std::vector<int64_t>& shape);
// Elements from the first to the last one the view touches, inclusive (0 if empty).
int64_t span_of(const std::vector<int64_t>& shape, const std::vector<int64_t>& stride);
// No two indices of the view address the same element (strides >= 0).
bool non_overlapping(const std::vector<int64_t>& shape, const std::vector<int64_t>& stride);
// Row-major strides of a contiguous tensor of `shape`.
std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& shape);
// The largest power of two dividing `address`, at most 4096 (0 gives 4096).
int64_t pointer_alignment(uintptr_t address);

}  // namespace lingprobe::format
