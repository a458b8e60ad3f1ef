// `lingprobe trace RUN_DIR [-o FILE] [--ranks LIST] [--from T] [--to T] [--max-events N]`
#pragma once

namespace lingprobe::tools {

int trace_command(int argc, char** argv);

}  // namespace lingprobe::tools
