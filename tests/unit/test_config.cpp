#include <catch2/catch.hpp>

#include <map>
#include <string>
#include <vector>

#include "api/config.h"
#include "format/op_selection.h"
#include "format/glob.h"

using namespace lingprobe;

TEST_CASE("every table entry is a setting apply_setting accepts with its default", "[config]") {
  for (const auto& e : api::config_table()) {
    api::Config c;
    INFO(e.name);
    std::string def = e.default_text;
    if (std::string(e.name) == "OUT" && def.empty()) def = "x";
    CHECK(api::apply_setting(c, e.name, def).ok());
  }
}

TEST_CASE("invalid values say what was wrong and what is accepted", "[config]") {
  api::Config c;
  CHECK(api::apply_setting(c, "NESTED", "maybe").message().find("expected a boolean") != std::string::npos);
  CHECK(api::apply_setting(c, "OVERFLOW", "sometimes").message().find("'drop' or 'block'") != std::string::npos);
  CHECK(api::apply_setting(c, "FLUSH_INTERVAL_MS", "0").message().find("from 1 to 3600000") != std::string::npos);
  // Values that parse but would overflow or spin: refused with the range (failed before: nan, inf and
  // 1e400 seconds were taken, 2^62 flush intervals overflowed the writer's wait, huge buffers were allocated).
  for (const char* v : {"nan", "inf", "-1", "1e400", "1e8", ""})
    CHECK(api::apply_setting(c, "SKIP_SECONDS", v).message().find("expected seconds from 0 to") != std::string::npos);
  for (const char* v : {"nan", "inf", "1.5", "-0.1"})
    CHECK(api::apply_setting(c, "SAMPLE_PROBABILITY", v).message().find("probability") != std::string::npos);
  CHECK(api::apply_setting(c, "FLUSH_INTERVAL_MS", "4611686018427387904").message().find("to 3600000") !=
        std::string::npos);
  CHECK(api::apply_setting(c, "BUFFER_RECORDS", "99999999999").message().find("to 16777216") != std::string::npos);
  CHECK(api::apply_setting(c, "RANK", "9223372036854775807").message().find("to 16777215") != std::string::npos);
  CHECK(api::apply_setting(c, "SKIP_CALLS", "99999999999999999999").message().find("expected an integer") !=
        std::string::npos);
  CHECK(api::apply_setting(c, "SAMPLE_BUDGET_RUN", "1e30").message().find("expected bytes") != std::string::npos);
  CHECK(api::apply_setting(c, "SAMPLE_BUDGET_RUN", "-1G").message().find("expected bytes") != std::string::npos);
  CHECK(c.flush_interval_ms == 500);  // a refused value leaves the option as it was
  CHECK(api::apply_setting(c, "NO_SUCH", "1").message().find("unknown option") != std::string::npos);
  CHECK(api::apply_setting(c, "NO_SUCH", "1").code() == format::StatusCode::kBadInput);
  CHECK(api::apply_setting(c, "ROLE", "captain").code() == format::StatusCode::kBadInput);
  CHECK(api::apply_setting(c, "SAMPLE_PLAN", "/nonexistent/run").code() == format::StatusCode::kIoFailed);
  CHECK(api::apply_setting(c, "lingprobe_nested", "on").ok());
  CHECK(c.nested);
}

TEST_CASE("environment: unknown LINGPROBE_* names are reported, not fatal", "[config]") {
  std::string a = "LINGPROBE_OUT=/tmp/x", b = "LINGPROBE_TYPO=1", d = "LINGPROBE_LIBRARY=/l.so", e = "PATH=/bin";
  std::string f = "LINGPROBE_FUZZ_SECONDS=5";  // scripts/test.sh's knob, exported by a developer: not an option
  char* env[] = {a.data(), b.data(), d.data(), e.data(), f.data(), nullptr};
  api::Config c;
  std::vector<std::string> unknown;
  CHECK(api::apply_environment(c, env, &unknown).ok());
  CHECK(c.out_dir == "/tmp/x");
  CHECK(unknown == std::vector<std::string>{"LINGPROBE_TYPO"});
}

TEST_CASE("op selection: global globs, per-stage rules as the seed's run used, deny", "[selection]") {
  format::OpSelection s;
  REQUIRE(s.parse("dit:aten::linear;vae:aten::conv3d;output:aten::to", "").empty());
  CHECK(s.selected("aten::linear", "aten::linear", "dit"));
  CHECK_FALSE(s.selected("aten::linear", "aten::linear", "vae"));
  CHECK(s.selected("aten::to", "aten::to.dtype", "output"));
  CHECK_FALSE(s.selected("aten::to", "aten::to.dtype", "unstaged"));
  REQUIRE(s.parse("aten::*conv*", "aten::conv1d").empty());
  CHECK(s.selected("aten::conv3d", "aten::conv3d", "any"));
  CHECK_FALSE(s.selected("aten::conv1d", "aten::conv1d", "any"));
  CHECK(s.parse("linear", "").find("no namespace") != std::string::npos);
  // Patterns no op name can match were taken silently before (the bad-configuration sweep found them).
  CHECK(s.parse("aten::[", "").find("has '['") != std::string::npos);
  CHECK(s.parse(";;dit:aten::x:y", "").find("has ':'") != std::string::npos);
  CHECK(s.parse("", "aten::a b").find("LINGPROBE_OPS_DENY: op pattern 'aten::a b' has ' '") == 0);
  CHECK(s.parse("aten::[", "", "LINGPROBE_SAMPLE_OPS").find("LINGPROBE_SAMPLE_OPS: ") == 0);
  REQUIRE(s.parse("c10d::allreduce_;_c10d_functional::*;aten::to.dtype,aten::*conv?d", "").empty());
  CHECK(format::glob_match("aten::*conv*", "aten::cudnn_convolution"));
  CHECK_FALSE(format::glob_match("aten::to", "aten::to_copy"));
}

TEST_CASE("a single ':' before a pattern without a namespace is read as a stage, and the message says so",
          "[selection]") {
  const std::string why = format::op_patterns_error("aten:linear", true);
  CHECK(why.find("reads as stage 'aten'") != std::string::npos);
  CHECK(why.find("did you mean 'aten::linear'") != std::string::npos);
  // The configuration refuses it before anything runs (lingprobe run validates with the same table).
  api::Config c;
  CHECK(api::apply_setting(c, "OPS", "aten:linear").code() == format::StatusCode::kBadInput);
  CHECK(api::apply_setting(c, "SAMPLE_OPS", "dit:linear").code() == format::StatusCode::kBadInput);
  CHECK(api::apply_setting(c, "OPS_DENY", "aten::a b").code() == format::StatusCode::kBadInput);
  CHECK(api::apply_setting(c, "OPS", "dit:aten::linear;aten::*conv*").ok());
}

TEST_CASE("patterns that matched no operator met, and the closest names", "[selection]") {
  format::OpSelection s;
  REQUIRE(s.parse("aten::Linear,aten::relu;dit:aten::conv2d", "").empty());
  const std::vector<std::pair<std::string, std::string>> met = {
      {"aten::linear", "aten::linear"}, {"aten::relu", "aten::relu"}, {"aten::randn", "aten::randn"}};
  CHECK(s.unmatched(met) == std::vector<std::string>{"aten::Linear", "dit:aten::conv2d"});
  const std::vector<std::string> names = {"aten::linear", "aten::relu", "aten::randn", "aten::addmm"};
  CHECK(format::closest_op_names("aten::Linear", names, 3) == std::vector<std::string>{"aten::linear"});
  CHECK(format::closest_op_names("dit:aten::lienar", names, 3) == std::vector<std::string>{"aten::linear"});
  CHECK(format::closest_op_names("aten::*Rel*", names, 3) == std::vector<std::string>{"aten::relu"});
  CHECK(format::closest_op_names("aten::conv2d", names, 3).empty());
}

TEST_CASE("every option refuses the bad values of its type with a message naming it", "[config]") {
  // By the table's type column, so that an option added later is covered too.
  const std::map<std::string, std::vector<std::string>> bad = {
      {"bool", {"", "maybe", "2", "yes please"}},
      {"int", {"", "abc", "1e3", "99999999999999999999999", "-99999999999999999999", "5x", "-5"}},
      {"float", {"", "x", "-1", "nan", "inf", "1e400", "1.5"}},
      {"bytes", {"", "-1G", "12X", "1e30", "nan", "G"}},
  };
  size_t cases = 0;
  for (const auto& e : api::config_table()) {
    std::vector<std::string> values;
    const std::string type = e.type;
    if (auto it = bad.find(type); it != bad.end())
      values = it->second;
    else if (type.find('|') != std::string::npos)
      values = {"", "bogus", "auto|never"};
    else if (std::string(e.name) == "OUT")
      values = {""};
    for (const auto& v : values) {
      api::Config c;
      const std::string err = api::apply_setting(c, e.name, v).message();
      INFO("LINGPROBE_" << e.name << "='" << v << "' -> " << err);
      // -5 is a valid RANK-like value only at -1; SAMPLE_PROBABILITY 1.5 and a number of seconds 1.5 differ.
      const bool allowed =
          v == "1.5" && (std::string(e.name) == "SKIP_SECONDS" || std::string(e.name) == "PROFILE_BUDGET_S");
      if (allowed) continue;
      CHECK(err.rfind("LINGPROBE_" + std::string(e.name) + ": ", 0) == 0);
      ++cases;
    }
  }
  CHECK(cases > 120);
}

TEST_CASE("config_differences names every option two configurations differ on, in either direction", "[config]") {
  using lingprobe::api::Config;
  using lingprobe::api::config_differences;
  Config a, b;
  CHECK(config_differences(a, b).empty());
  b.out_dir = "elsewhere";
  CHECK(config_differences(a, b) == "LINGPROBE_OUT");
  b.out_dir = "./" + a.out_dir + "/";  // a notebook cell re-run with the same directory spelt another way
  CHECK(config_differences(a, b).empty());
  b.out_dir = ".//" + a.out_dir;
  CHECK(config_differences(a, b).empty());
  b.out_dir = "/" + a.out_dir;  // not "./" stripped into an absolute path
  CHECK(config_differences(a, b) == "LINGPROBE_OUT");
  b = a;
  b.sample_every = 7;  // without SNAPSHOTS or PROFILE on either side the sampling options have no effect
  CHECK(config_differences(a, b).empty());
  b.snapshots = true;
  CHECK(config_differences(a, b) == "LINGPROBE_SNAPSHOTS, LINGPROBE_SAMPLE_EVERY");
  b = a;
  b.sample_plan = "earlier-run";  // not in the header, compared all the same
  CHECK(config_differences(a, b) == "LINGPROBE_SAMPLE_PLAN");
  b = a;
  a.fold_scalars = true;  // written only when set: a one-sided key
  CHECK(config_differences(a, b) == "LINGPROBE_FOLD_SCALARS");
  CHECK(config_differences(b, a) == "LINGPROBE_FOLD_SCALARS");
  a = b;
  a.call_times = false;  // likewise, and only where it has an effect: with call records
  CHECK(config_differences(a, b) == "LINGPROBE_CALL_TIMES");
  a.call_records = b.call_records = false;
  CHECK(config_differences(a, b).empty());
  b.call_records = true;
  a = b;
  b.rank = 3;
  b.world_size = 4;
  CHECK(config_differences(a, b) == "LINGPROBE_RANK, LINGPROBE_WORLD_SIZE");
  b = a;
  b.nested = true;  // the options that apply only without it (SUPPRESS_NESTED) are not named: the user never set them
  CHECK(config_differences(a, b) == "LINGPROBE_NESTED");
  b = a;
  b.run_id = "exported-by-the-first-init";  // read back from the environment by a later init: the same run
  CHECK(config_differences(a, b).empty());
}

TEST_CASE("a stage map's syntax is checked before any job starts, a ',' between rules named", "[config]") {
  // A new user's 'attn=SPAttention,block=Block' read as one class that never ran, named only at the job's end.
  std::string err = api::check_stage_map("attn=SPAttention,block=Block").message();
  CHECK(err.find("'SPAttention,block=Block' is not a class or pkg.module:function name: rules are separated by "
                 "';'") != std::string::npos);
  for (const char* bad : {"dit", "=WanModel", "dit=", "dit=Wan Model", "out=pkg.mod:", "out=:save"}) {
    INFO(bad);
    CHECK(api::check_stage_map(bad).code() == format::StatusCode::kBadInput);
  }
  for (const char* good : {"", "dit=WanModel;vae=WanVAE|Decoder3d;output=wan.utils.utils:save_video",
                           " dit = wan.modules.model.WanModel ; ", "x=A||B;", "m=pkg.mod:Class.method"}) {
    INFO(good);
    CHECK(api::check_stage_map(good).ok());
  }
}
