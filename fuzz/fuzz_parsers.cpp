// libFuzzer: lingprobe's configuration parsers on any text. The first byte
// chooses the parser; the rest is its input:
//   0 a setting NAME=VALUE (apply_setting) and the same as an environment
//   1 OPS and OPS_DENY (separated by '\n'), then matching op names against them
//   2 an NVTX map, then ranges pushed and popped by name through it
//   3 hash-signature's input (JSON signatures, one per line)
// Errors are answers; crashes, hangs and leaks are findings.
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "api/config.h"
#include "capture/nvtx_stages.h"
#include "format/op_selection.h"
#include "format/glob.h"
#include "hash_signature.h"

namespace {

std::pair<std::string, std::string> split(const std::string& s, char sep) {
  const size_t at = s.find(sep);
  if (at == std::string::npos) return {s, ""};
  return {s.substr(0, at), s.substr(at + 1)};
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string input(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 4) {
    case 0: {
      const auto [name, value] = split(input, '=');
      lingprobe::api::Config c;
      (void)lingprobe::api::apply_setting(c, name, value);
      std::string entry = "LINGPROBE_" + input;
      std::vector<char*> env = {entry.data(), nullptr};
      std::vector<std::string> unknown;
      lingprobe::api::Config e;
      (void)lingprobe::api::apply_environment(e, env.data(), &unknown);
      (void)lingprobe::api::config_json(e);
      break;
    }
    case 1: {
      const auto [ops, rest] = split(input, '\n');
      const auto [deny, name] = split(rest, '\n');
      lingprobe::format::OpSelection s;
      if (s.parse(ops, deny).empty()) {
        (void)s.selected(name, name + ".default", "dit");
        (void)s.selected("aten::linear", "aten::linear.default", name);
      }
      (void)lingprobe::format::glob_match(ops.c_str(), name.c_str());
      break;
    }
    case 2: {
      const auto [spec, names] = split(input, '\n');
      if (!lingprobe::capture::set_nvtx_map(spec).empty()) break;
      std::istringstream lines(names);
      int depth = 0;
      for (std::string name; std::getline(lines, name) && depth < 64;) {
        if (!name.empty() && name[0] == '-') {
          lingprobe::capture::nvtx_range_pop();
          --depth;
        } else {
          lingprobe::capture::nvtx_range_push(name.c_str());
          ++depth;
        }
      }
      while (depth-- > 0) lingprobe::capture::nvtx_range_pop();
      (void)lingprobe::capture::set_nvtx_map("");
      break;
    }
    default: {
      std::istringstream in(input);
      std::ostringstream out, err;
      (void)lingprobe::tools::hash_signature(in, out, err);
    }
  }
  return 0;
}
