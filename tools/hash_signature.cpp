#include "hash_signature.h"

#include <string>

#include "format/canonical_json.h"
#include "format/json_parse.h"

namespace lingprobe::tools {

int hash_signature(std::istream& in, std::ostream& out, std::ostream& err) {
  std::string line;
  size_t line_number = 0;
  while (std::getline(in, line)) {
    ++line_number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    format::JsonParseResult parsed = format::parse_json(line);
    if (parsed.status.ok() && parsed.value.kind() != format::JsonValue::Kind::Object) {
      parsed.status =
          format::Status(format::StatusCode::kBadInput, "expected a JSON object (a signature), got another JSON value");
      parsed.offset = 0;
    }
    if (!parsed.status.ok()) {
      out.flush();
      err << "lingprobe hash-signature: line " << line_number << ": " << parsed.status.message() << " (column "
          << parsed.offset + 1 << "); stopped here, " << (line_number - 1)
          << " line(s) before it were hashed. Fix the line, or remove it, and run again.\n";
      return 2;
    }
    out << format::canonical_sha256(parsed.value) << '\n';
  }
  out.flush();
  return 0;
}

}  // namespace lingprobe::tools
