/* liblingprobe_preload.so: the LD_PRELOAD entry point. A small C library with
 * no torch dependency, so that children which never load torch (ffmpeg,
 * compilers, shells) are untouched. It loads the real liblingprobe.so only in
 * a process that loads libtorch itself: at start-up (a C++ program linked to
 * libtorch) or when an outermost dlopen() returns with libtorch loaded
 * (Python's `import torch`). A libtorch other than the one lingprobe was
 * built against is refused with one line; recording stays off. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef LINGPROBE_BUILT_TORCH_CPU
#define LINGPROBE_BUILT_TORCH_CPU ""
#endif

typedef void* (*dlopen_fn)(const char*, int);
static dlopen_fn real_dlopen;
static int attach_done;
static __thread int dlopen_depth;

struct torch_search {
  char path[PATH_MAX];
};

static int find_torch_cpu(struct dl_phdr_info* info, size_t size, void* data) {
  (void)size;
  const char* name = info->dlpi_name;
  const char* base = name ? strrchr(name, '/') : NULL;
  base = base ? base + 1 : name;
  if (base && strncmp(base, "libtorch_cpu.so", 15) == 0) {
    struct torch_search* s = (struct torch_search*)data;
    strncpy(s->path, name, sizeof s->path - 1);
    return 1;
  }
  return 0;
}

static void real_library_path(char* out, size_t size) {
  const char* env = getenv("LINGPROBE_REAL_LIBRARY");
  if (env && *env) {
    snprintf(out, size, "%s", env);
    return;
  }
  Dl_info info;
  if (dladdr((void*)&real_library_path, &info) && info.dli_fname) {
    snprintf(out, size, "%s", info.dli_fname);
    char* slash = strrchr(out, '/');
    if (slash) {
      snprintf(slash + 1, size - (size_t)(slash + 1 - out), "liblingprobe.so");
      return;
    }
  }
  snprintf(out, size, "liblingprobe.so");
}

static void try_attach(void) {
  if (attach_done || !real_dlopen) return;
  struct torch_search found;
  memset(&found, 0, sizeof found);
  if (!dl_iterate_phdr(find_torch_cpu, &found)) return; /* no libtorch (yet) */
  attach_done = 1;

  const char* built = LINGPROBE_BUILT_TORCH_CPU;
  char loaded_real[PATH_MAX];
  if (built[0] && realpath(found.path, loaded_real) && strcmp(loaded_real, built) != 0) {
    fprintf(stderr,
            "[lingprobe] this process loaded %s, but lingprobe was built against %s; recording is off "
            "(rebuild lingprobe against this torch: scripts/build.sh -DCMAKE_PREFIX_PATH=$(python3 -c "
            "'import torch;print(torch.utils.cmake_prefix_path)'))\n",
            loaded_real, built);
    return;
  }
  char path[PATH_MAX];
  real_library_path(path, sizeof path);
  void* handle = real_dlopen(path, RTLD_NOW | RTLD_GLOBAL);
  if (!handle) {
    fprintf(stderr, "[lingprobe] cannot load %s: %s; recording is off (set LINGPROBE_REAL_LIBRARY)\n", path,
            dlerror());
    return;
  }
  int (*attach)(void) = (int (*)(void))dlsym(handle, "lingprobe_preload_attach");
  if (attach) attach();
}

/* Interposes dlopen: Python's extension-module loader calls it. */
__attribute__((visibility("default"))) void* dlopen(const char* file, int mode) {
  if (!real_dlopen) real_dlopen = (dlopen_fn)dlsym(RTLD_NEXT, "dlopen");
  ++dlopen_depth;
  void* handle = real_dlopen(file, mode);
  --dlopen_depth;
  if (dlopen_depth == 0 && !attach_done) try_attach();
  return handle;
}

__attribute__((constructor)) static void lingprobe_preload_init(void) {
  real_dlopen = (dlopen_fn)dlsym(RTLD_NEXT, "dlopen");
  const char* enable = getenv("LINGPROBE_PRELOAD");
  if (enable && strcmp(enable, "0") == 0) {
    attach_done = 1;
    return;
  }
  try_attach();
}
