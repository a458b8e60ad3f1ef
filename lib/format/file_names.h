// Text made safe as one file-name component: letters, digits, '.', '_' and
// '-' kept, anything else '_' (run ids, stage names in snapshot and profile
// names). Pure.
#pragma once

#include <string>

namespace lingprobe::format {

// At most `max_length` characters of `text`, each unsafe one replaced by '_'.
std::string safe_name_part(const std::string& text, size_t max_length);

}  // namespace lingprobe::format
