// `lingprobe audit [-o FILE] [--allow-mixed-runs] [--quiet] PATH...`
#pragma once

namespace lingprobe::tools {

int audit_command(int argc, char** argv);

}  // namespace lingprobe::tools
