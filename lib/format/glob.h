// Shell-style glob matching ('*' any run, '?' one character), used for op
// selection patterns such as "aten::*conv*".
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace lingprobe::format {

bool glob_match(const char* pattern, const char* text);

// Levenshtein distance (insertions, deletions, substitutions): how close a
// misspelt name is to a real one, for "did you mean" hints.
size_t edit_distance(std::string_view a, std::string_view b);

// Of `names`, the first one closest to `want` within `max_distance` edits; "" when none is that close.
template <typename Names>
std::string closest_name(std::string_view want, const Names& names, size_t max_distance) {
  std::string closest;
  size_t best = max_distance + 1;
  for (const auto& name : names)
    if (const size_t d = edit_distance(want, name); d < best) best = d, closest = name;
  return closest;
}

}  // namespace lingprobe::format
