#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include "format/float_repr.h"

using lingprobe::format::python_float_repr;

TEST_CASE("python_float_repr matches CPython repr() on tricky values", "[format][float]") {
  // Expected strings are what `python3 -c 'print(repr(x))'` printed.
  struct Case {
    double value;
    const char* repr;
  };
  const Case cases[] = {
      {1e-06, "1e-06"},
      {0.1, "0.1"},
      {1e16, "1e+16"},
      {1e+16, "1e+16"},
      {5e-324, "5e-324"},
      {-0.0, "-0.0"},
      {0.0, "0.0"},
      {123456789.0, "123456789.0"},
      {std::numeric_limits<double>::infinity(), "inf"},
      {-std::numeric_limits<double>::infinity(), "-inf"},
      {std::numeric_limits<double>::quiet_NaN(), "nan"},
      {1e15, "1000000000000000.0"},
      {0.0001, "0.0001"},
      {0.00001, "1e-05"},
      {1.5, "1.5"},
      {2.5e-05, "2.5e-05"},
      {1 / 3.0, "0.3333333333333333"},
      {9007199254740992.0, "9007199254740992.0"},
      {1e22, "1e+22"},
      {1.7976931348623157e308, "1.7976931348623157e+308"},
      {2.2250738585072014e-308, "2.2250738585072014e-308"},
      {0.1 + 0.2, "0.30000000000000004"},
      {100.0, "100.0"},
      {123456789012345678.0, "1.2345678901234568e+17"},
      {12345.678, "12345.678"},
      {-1e-07, "-1e-07"},
      {1e-323, "1e-323"},
      {9999999999999998.0, "9999999999999998.0"},
      {1e301, "1e+301"},
      {-2.5, "-2.5"},
      {3.141592653589793, "3.141592653589793"},
  };
  for (const auto& c : cases) {
    INFO("expected " << c.repr);
    CHECK(python_float_repr(c.value) == c.repr);
  }
}
