/* liblingprobe_preload.so: the LD_PRELOAD and NVTX injection entry point, a
 * small C library with no torch dependency, so that children which never load
 * torch (ffmpeg, compilers, shells) are untouched.
 *
 * It loads the real liblingprobe.so (RTLD_LOCAL) only in a process that loads
 * libtorch itself: at start-up (a C++ program linked to libtorch), or when
 * the Python shim's sitecustomize sees `import torch` finish and calls
 * lingprobe_preload_stub_attach(). It never interposes dlopen: glibc resolves
 * a dlopen against its caller's RUNPATH, and an interposer makes itself the
 * caller (seen on the H200: torch then loaded the system's cuDNN instead of
 * its own). A libtorch other than the one lingprobe was built against is
 * refused with one line; recording stays off.
 *
 * NVTX: NVTX delivers nvtxRangePush/Pop only to its injection library, named
 * by NVTX_INJECTION64_PATH and read at each NVTX copy's first call. The
 * constructor points that variable at this stub (unless a tool such as nsys
 * already owns it), and InitializeInjectionNvtx2 patches the core push/pop
 * slots to forward range names to the real library, which maps them to
 * stages (LINGPROBE_NVTX_MAP). Ranges pushed before the real library is
 * loaded are balanced here so that their pops never pop a stage. */
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

static int attach_done;

/* Set once the real library is loaded (NVTX forwarding). */
static void (*forward_push)(const char* name);
static void (*forward_pop)(void);

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
  if (attach_done) return;
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
  /* RTLD_LOCAL: lingprobe's symbols must never interpose for libraries the
   * process loads later (the Python shim finds this copy by its soname). */
  void* handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    fprintf(stderr, "[lingprobe] cannot load %s: %s; recording is off (set LINGPROBE_REAL_LIBRARY)\n", path,
            dlerror());
    return;
  }
  if (!getenv("LINGPROBE_LIBRARY")) setenv("LINGPROBE_LIBRARY", path, 0); /* the Python shim uses the same copy */
  int (*attach)(void) = (int (*)(void))dlsym(handle, "lingprobe_preload_attach");
  if (attach) attach();
  forward_pop = (void (*)(void))dlsym(handle, "lingprobe_nvtx_range_pop");
  forward_push = (void (*)(const char*))dlsym(handle, "lingprobe_nvtx_range_push");
}

#ifdef LINGPROBE_HAVE_NVTX3
#include <nvtx3/nvToolsExt.h>

static __thread int unforwarded_depth; /* ranges pushed before forwarding began */

static void range_push(const char* name) {
  if (forward_push && forward_pop) forward_push(name);
  else ++unforwarded_depth;
}

static void range_pop(void) {
  if (unforwarded_depth > 0) --unforwarded_depth;
  else if (forward_pop) forward_pop();
}

static const char* ascii_message(const nvtxEventAttributes_t* a) {
  return (a && a->messageType == NVTX_MESSAGE_TYPE_ASCII) ? a->message.ascii : NULL;
}

static int NVTX_API nvtx_range_push_a(const char* message) { range_push(message); return 0; }
static int NVTX_API nvtx_range_push_w(const wchar_t* message) { (void)message; range_push(NULL); return 0; }
static int NVTX_API nvtx_range_push_ex(const nvtxEventAttributes_t* a) { range_push(ascii_message(a)); return 0; }
static int NVTX_API nvtx_range_pop(void) { range_pop(); return 0; }
static int NVTX_API nvtx_domain_range_push_ex(nvtxDomainHandle_t d, const nvtxEventAttributes_t* a) {
  (void)d;
  range_push(ascii_message(a));
  return 0;
}
static int NVTX_API nvtx_domain_range_pop(nvtxDomainHandle_t d) { (void)d; range_pop(); return 0; }

static void patch(NvtxFunctionTable table, unsigned size, unsigned slot, NvtxFunctionPointer fn) {
  if (table && slot <= size && table[slot]) *table[slot] = fn;
}

__attribute__((visibility("default"))) int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_export_table) {
  const NvtxExportTableCallbacks* callbacks =
      (const NvtxExportTableCallbacks*)get_export_table(NVTX_ETID_CALLBACKS);
  if (!callbacks || !callbacks->GetModuleFunctionTable) return 0;
  NvtxFunctionTable core = NULL, core2 = NULL;
  unsigned core_size = 0, core2_size = 0;
  if (!callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &core, &core_size)) return 0;
  patch(core, core_size, NVTX_CBID_CORE_RangePushA, (NvtxFunctionPointer)nvtx_range_push_a);
  patch(core, core_size, NVTX_CBID_CORE_RangePushW, (NvtxFunctionPointer)nvtx_range_push_w);
  patch(core, core_size, NVTX_CBID_CORE_RangePushEx, (NvtxFunctionPointer)nvtx_range_push_ex);
  patch(core, core_size, NVTX_CBID_CORE_RangePop, (NvtxFunctionPointer)nvtx_range_pop);
  if (callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &core2, &core2_size)) {
    patch(core2, core2_size, NVTX_CBID_CORE2_DomainRangePushEx, (NvtxFunctionPointer)nvtx_domain_range_push_ex);
    patch(core2, core2_size, NVTX_CBID_CORE2_DomainRangePop, (NvtxFunctionPointer)nvtx_domain_range_pop);
  }
  return 1;
}

static void claim_nvtx_injection(void) {
  const char* current = getenv("NVTX_INJECTION64_PATH");
  Dl_info info;
  if (!dladdr((void*)&claim_nvtx_injection, &info) || !info.dli_fname) return;
  if (current && *current) {
    if (strcmp(current, info.dli_fname) != 0 && getenv("LINGPROBE_NVTX_MAP"))
      fprintf(stderr, "[lingprobe] NVTX_INJECTION64_PATH is owned by another tool (%s); NVTX ranges will not "
                      "set stages (use the stage API, the shim or LINGPROBE_STAGE_MAP)\n", current);
    return;
  }
  setenv("NVTX_INJECTION64_PATH", info.dli_fname, 1);
}
#else
static void claim_nvtx_injection(void) {}
#endif

/* Called by the Python shim once `import torch` has finished (and by anyone
 * who loads libtorch later by hand). Idempotent; returns 1 once attached. */
__attribute__((visibility("default"))) int lingprobe_preload_stub_attach(void) {
  try_attach();
  return forward_pop != NULL;
}

__attribute__((constructor)) static void lingprobe_preload_init(void) {
  const char* enable = getenv("LINGPROBE_PRELOAD");
  if (enable && strcmp(enable, "0") == 0) {
    attach_done = 1;
    return;
  }
  claim_nvtx_injection();
  try_attach();
}
