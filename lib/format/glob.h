// Shell-style glob matching ('*' any run, '?' one character), used for op
// selection patterns such as "aten::*conv*".
#pragma once

#include <cstddef>
#include <string_view>

namespace lingprobe::format {

bool glob_match(const char* pattern, const char* text);

// Levenshtein distance (insertions, deletions, substitutions): how close a
// misspelt name is to a real one, for "did you mean" hints.
size_t edit_distance(std::string_view a, std::string_view b);

}  // namespace lingprobe::format
