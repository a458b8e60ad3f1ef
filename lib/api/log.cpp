#include "api/log.h"

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <mutex>

namespace lingprobe::api {
namespace {

spdlog::logger& logger() {
  static spdlog::logger* l = [] {
    auto* lg = new spdlog::logger("lingprobe", std::make_shared<spdlog::sinks::stderr_sink_mt>());
    lg->set_pattern("[lingprobe] %l: %v");
    lg->set_level(spdlog::level::info);
    return lg;
  }();
  return *l;
}

}  // namespace

void set_log_level(const std::string& level) { logger().set_level(spdlog::level::from_str(level)); }

void set_log_rank(long long rank) {
  logger().set_pattern(rank < 0 ? std::string("[lingprobe] %l: %v")
                                : "[lingprobe rank " + std::to_string(rank) + "] %l: %v");
}

void log_debug(const std::string& m) { logger().debug(m); }
void log_info(const std::string& m) { logger().info(m); }
void log_warn(const std::string& m) { logger().warn(m); }
void log_error(const std::string& m) { logger().error(m); }

}  // namespace lingprobe::api
