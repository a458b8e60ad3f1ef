// Python's repr() of a float: the shortest decimal string that round-trips,
// laid out the way CPython's float_repr does (fixed notation for decimal
// exponents in [-4, 16), else d.ddde+XX with at least two exponent digits;
// always a '.0' on integral values). Non-finite values give "inf", "-inf" and
// "nan" (repr's spelling; the JSON writer spells them as Python's json does).
#pragma once

#include <string>

namespace lingprobe::format {

std::string python_float_repr(double value);

}  // namespace lingprobe::format
