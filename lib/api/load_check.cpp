#include "api/load_check.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdlib.h>

#include <cstdio>
#include <cstring>

namespace lingprobe::api {
namespace {

bool g_preloaded = false;
std::string* g_message = nullptr;

std::string real(const std::string& p) {
  char buf[PATH_MAX];
  return ::realpath(p.c_str(), buf) ? std::string(buf) : p;
}

__attribute__((constructor)) void check_how_we_were_loaded() {
  const char* preload = std::getenv("LD_PRELOAD");
  Dl_info info;
  if (!preload || !*preload || !dladdr(reinterpret_cast<void*>(&check_how_we_were_loaded), &info) || !info.dli_fname)
    return;
  const std::string self = real(info.dli_fname);
  const std::string list = preload;
  size_t pos = 0;
  while (pos <= list.size()) {
    size_t end = list.find_first_of(": ", pos);
    if (end == std::string::npos) end = list.size();
    const std::string entry = list.substr(pos, end - pos);
    pos = end + 1;
    if (entry.empty() || entry.find("liblingprobe.so") == std::string::npos) continue;
    if (real(entry) != self && entry.find('/') != std::string::npos) continue;
    g_preloaded = true;
    std::string dir = self.substr(0, self.rfind('/') + 1);
    g_message = new std::string(
        "liblingprobe.so was preloaded itself; it links libtorch, which LD_PRELOAD would load into "
        "every child process, so it records nothing. Preload the torch-free stub instead: "
        "LD_PRELOAD=" +
        dir + "liblingprobe_preload.so");
    if (!std::getenv("LINGPROBE_PRELOAD_WARNED")) {
      std::fprintf(stderr, "[lingprobe] %s\n", g_message->c_str());
      ::setenv("LINGPROBE_PRELOAD_WARNED", "1", 1);  // once per process tree
    }
    return;
  }
}

}  // namespace

bool loaded_by_ld_preload(std::string* message) {
  if (message && g_message) *message = *g_message;
  return g_preloaded;
}

}  // namespace lingprobe::api
