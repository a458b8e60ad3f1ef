#include "sink/extension_library.h"

#include <link.h>

#include <cstring>

namespace lingprobe::sink {
namespace {

bool torch_namespace(const std::string& ns) {
  for (const char* own : {"aten", "prim", "prims", "c10d", "_c10d_functional", "profiler", "quantized", "_quantized",
                          "mkldnn", "mkl", "cuda", "inductor", "rngprims", "higher_order", "debugprims"})
    if (ns == own) return true;
  return false;
}

struct Search {
  std::string folder;  // "/torchvision/"
  std::string prefix;  // "libtorchvision.so"
  std::string in_folder, in_folder_c, by_name;
};

int visit(dl_phdr_info* info, size_t, void* data) {
  auto& s = *static_cast<Search*>(data);
  if (!info->dlpi_name || !*info->dlpi_name) return 0;
  const std::string path = info->dlpi_name;
  const size_t slash = path.rfind('/');
  const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  if (base.find(".so") == std::string::npos) return 0;
  if (slash != std::string::npos && slash + 1 >= s.folder.size() &&
      path.compare(slash + 1 - s.folder.size(), s.folder.size(), s.folder) == 0) {
    if (base.compare(0, 2, "_C") == 0 && s.in_folder_c.empty()) s.in_folder_c = path;
    if (s.in_folder.empty()) s.in_folder = path;
  }
  if (base.compare(0, s.prefix.size(), s.prefix) == 0 && s.by_name.empty()) s.by_name = path;
  return 0;
}

}  // namespace

std::string extension_library(const std::string& ns) {
  if (ns.empty() || torch_namespace(ns)) return "";
  Search s{"/" + ns + "/", "lib" + ns + ".so", "", "", ""};
  dl_iterate_phdr(visit, &s);
  return !s.in_folder_c.empty() ? s.in_folder_c : !s.in_folder.empty() ? s.in_folder : s.by_name;
}

}  // namespace lingprobe::sink
