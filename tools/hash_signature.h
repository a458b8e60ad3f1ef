// `lingprobe hash-signature`: one JSON object per input line (any key order,
// any whitespace) -> the hex SHA-256 of its canonical text, one per line, in
// order. Blank lines are skipped. At the first malformed line it stops, after
// the hashes of the lines before it, with an error naming the line on `err`.
#pragma once

#include <istream>
#include <ostream>

namespace lingprobe::tools {

// Returns the process exit status: 0 on success, 2 on a malformed line.
int hash_signature(std::istream& in, std::ostream& out, std::ostream& err);

}  // namespace lingprobe::tools
