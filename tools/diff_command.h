// `lingprobe diff RUN_A RUN_B [--json] [-o FILE] [--stage S]`
#pragma once

namespace lingprobe::tools {

int diff_command(int argc, char** argv);

}  // namespace lingprobe::tools
