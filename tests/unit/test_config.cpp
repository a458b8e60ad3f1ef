#include <catch2/catch.hpp>

#include "api/config.h"
#include "capture/op_selection.h"
#include "format/glob.h"

using namespace lingprobe;

TEST_CASE("every table entry is a setting apply_setting accepts with its default", "[config]") {
  for (const auto& e : api::config_table()) {
    api::Config c;
    INFO(e.name);
    std::string def = e.default_text;
    if (std::string(e.name) == "OUT" && def.empty()) def = "x";
    CHECK(api::apply_setting(c, e.name, def).empty());
  }
}

TEST_CASE("invalid values say what was wrong and what is accepted", "[config]") {
  api::Config c;
  CHECK(api::apply_setting(c, "NESTED", "maybe").find("expected a boolean") != std::string::npos);
  CHECK(api::apply_setting(c, "OVERFLOW", "sometimes").find("'drop' or 'block'") != std::string::npos);
  CHECK(api::apply_setting(c, "FLUSH_INTERVAL_MS", "0").find(">= 1") != std::string::npos);
  CHECK(api::apply_setting(c, "NO_SUCH", "1").find("unknown option") != std::string::npos);
  CHECK(api::apply_setting(c, "lingprobe_nested", "on").empty());
  CHECK(c.nested);
}

TEST_CASE("environment: unknown LINGPROBE_* names are reported, not fatal", "[config]") {
  std::string a = "LINGPROBE_OUT=/tmp/x", b = "LINGPROBE_TYPO=1", d = "LINGPROBE_LIBRARY=/l.so", e = "PATH=/bin";
  char* env[] = {a.data(), b.data(), d.data(), e.data(), nullptr};
  api::Config c;
  std::vector<std::string> unknown;
  CHECK(api::apply_environment(c, env, &unknown).empty());
  CHECK(c.out_dir == "/tmp/x");
  CHECK(unknown == std::vector<std::string>{"LINGPROBE_TYPO"});
}

TEST_CASE("op selection: global globs, per-stage rules as the seed's run used, deny", "[selection]") {
  capture::OpSelection s;
  REQUIRE(s.parse("dit:aten::linear;vae:aten::conv3d;output:aten::to", "").empty());
  CHECK(s.selected("aten::linear", "aten::linear", "dit"));
  CHECK_FALSE(s.selected("aten::linear", "aten::linear", "vae"));
  CHECK(s.selected("aten::to", "aten::to.dtype", "output"));
  CHECK_FALSE(s.selected("aten::to", "aten::to.dtype", "unstaged"));
  REQUIRE(s.parse("aten::*conv*", "aten::conv1d").empty());
  CHECK(s.selected("aten::conv3d", "aten::conv3d", "any"));
  CHECK_FALSE(s.selected("aten::conv1d", "aten::conv1d", "any"));
  CHECK(s.parse("linear", "").find("no namespace") != std::string::npos);
  CHECK(format::glob_match("aten::*conv*", "aten::cudnn_convolution"));
  CHECK_FALSE(format::glob_match("aten::to", "aten::to_copy"));
}
