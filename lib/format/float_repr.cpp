#include "format/float_repr.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>

namespace lingprobe::format {

std::string python_float_repr(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value < 0 ? "-inf" : "inf";

  // Shortest round-trip digits in scientific form, e.g. "-1.2345e+06".
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, value, std::chars_format::scientific);
  std::string sci(buf, res.ptr);

  std::string out;
  size_t pos = 0;
  if (sci[0] == '-') {
    out.push_back('-');
    pos = 1;
  }
  size_t e = sci.find('e');
  std::string digits;
  for (size_t i = pos; i < e; ++i)
    if (sci[i] != '.') digits.push_back(sci[i]);
  int exponent = std::atoi(sci.c_str() + e + 1);
  int decpt = exponent + 1;  // digits before the decimal point
  int ndigits = static_cast<int>(digits.size());

  if (decpt <= -4 || decpt > 16) {
    out.push_back(digits[0]);
    if (ndigits > 1) {
      out.push_back('.');
      out.append(digits, 1, std::string::npos);
    }
    out.push_back('e');
    int x = decpt - 1;
    out.push_back(x < 0 ? '-' : '+');
    x = std::abs(x);
    if (x < 10) out.push_back('0');
    out += std::to_string(x);
  } else if (decpt <= 0) {
    out += "0.";
    out.append(static_cast<size_t>(-decpt), '0');
    out += digits;
  } else if (decpt >= ndigits) {
    out += digits;
    out.append(static_cast<size_t>(decpt - ndigits), '0');
    out += ".0";
  } else {
    out.append(digits, 0, static_cast<size_t>(decpt));
    out.push_back('.');
    out.append(digits, static_cast<size_t>(decpt), std::string::npos);
  }
  return out;
}

}  // namespace lingprobe::format
