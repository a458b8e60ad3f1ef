// `lingprobe audit [-o FILE] [--snapshots DIR] [--profiles DIR] [--quiet] PATH...`
#pragma once

namespace lingprobe::tools {

int audit_command(int argc, char** argv);

}  // namespace lingprobe::tools
