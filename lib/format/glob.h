// Shell-style glob matching ('*' any run, '?' one character), used for op
// selection patterns such as "aten::*conv*".
#pragma once

namespace lingprobe::format {

bool glob_match(const char* pattern, const char* text);

}  // namespace lingprobe::format
