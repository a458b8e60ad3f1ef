// lingprobe's log: one line per message on stderr, prefixed
// "[lingprobe rank R] level:", at the level LINGPROBE_LOG_LEVEL sets (spdlog).
#pragma once

#include <string>

namespace lingprobe::api {

void set_log_level(const std::string& level);  // trace|debug|info|warn|error|off
void set_log_rank(long long rank);             // -1: no rank in the prefix
void log_debug(const std::string& message);
void log_info(const std::string& message);
void log_warn(const std::string& message);
void log_error(const std::string& message);

}  // namespace lingprobe::api
