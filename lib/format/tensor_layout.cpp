#include "format/tensor_layout.h"

#include <algorithm>
#include <cstdint>
#include <utility>

namespace lingprobe::format {

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t s : shape)
    if (s < 0 || __builtin_mul_overflow(n, s, &n)) return -1;
  return n;
}

int64_t span_of(const std::vector<int64_t>& shape, const std::vector<int64_t>& stride) {
  int64_t last = 0;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 0) return 0;
    int64_t step = 0;
    if (shape[i] < 0 || stride[i] < 0 || __builtin_mul_overflow(shape[i] - 1, stride[i], &step) ||
        __builtin_add_overflow(last, step, &last))
      return -1;
  }
  return last == INT64_MAX ? -1 : last + 1;
}

bool non_overlapping(const std::vector<int64_t>& shape, const std::vector<int64_t>& stride) {
  std::vector<std::pair<int64_t, int64_t>> dims;  // (stride, size) of dims with size > 1
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 0) return true;
    if (shape[i] > 1) dims.emplace_back(stride[i], shape[i]);
  }
  std::sort(dims.begin(), dims.end());
  int64_t needed = 1;  // the smallest stride the next dim may have
  for (const auto& [st, sz] : dims) {
    if (st < needed) return false;
    needed = st * sz;
  }
  return true;
}

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> st(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;) st[i - 1] = st[i] * std::max<int64_t>(shape[i], 1);
  return st;
}

int64_t pointer_alignment(uintptr_t address) {
  if (address == 0) return 4096;
  int64_t a = static_cast<int64_t>(address & (~address + 1));
  return a > 4096 ? 4096 : a;
}

}  // namespace lingprobe::format
