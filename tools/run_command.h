// `lingprobe run [options] -- CMD ARGS...`: runs CMD with lingprobe preloaded
// (LD_PRELOAD of the torch-free stub, LINGPROBE_* set from the options),
// waits, reports the metadata files, and exits with CMD's status.
// `lingprobe config`: prints the configuration table.
#pragma once

namespace lingprobe::tools {

int run_command(int argc, char** argv);
int config_command(int argc, char** argv);

}  // namespace lingprobe::tools
