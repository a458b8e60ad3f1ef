// Which loaded shared library registers an extension's operators, so that a
// replay in another process can load it: an op outside torch's own
// namespaces (torchvision::roi_align, a custom op's mylib::fused) is
// registered by a library its program loaded (torchvision's _C extension,
// libmylib.so), which the replay process does not load by itself.
#pragma once

#include <string>

namespace lingprobe::sink {

// The path of a library loaded in this process that is, by its name, the one
// of operator namespace `ns`: a Python extension in a folder named `ns`
// (".../torchvision/_C.cpython-311-x86_64-linux-gnu.so"; `_C*` preferred over
// the folder's other libraries), else "lib{ns}.so*". "" for torch's own
// namespaces (aten, prim, ...) and when none is loaded. Any thread; reads the
// loader's list (dl_iterate_phdr), so not for the op's own thread.
std::string extension_library(const std::string& ns);

}  // namespace lingprobe::sink
