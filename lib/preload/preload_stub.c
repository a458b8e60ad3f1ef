/* liblingprobe_preload.so: the LD_PRELOAD and NVTX injection entry point, a
 * small C library with no torch dependency, so that children which never load
 * torch (ffmpeg, compilers, shells) are untouched.
 *
 * It loads the real liblingprobe.so (RTLD_LOCAL) only in a process that loads
 * libtorch itself: at start-up (a C++ program linked to libtorch), or when
 * the Python shim's sitecustomize sees `import torch` finish and calls
 * lingprobe_preload_stub_attach().
 *
 * Python: the constructor runs before the interpreter reads its environment,
 * so in a Python process (the executable exports Py_BytesMain) it puts the
 * shim's directory first on PYTHONPATH; the shim's sitecustomize undoes that
 * in os.environ at once (children get the user's PYTHONPATH; a Python child
 * gets the entry again from its own copy of this stub) and chains any
 * sitecustomize it shadows. `python -I`, `-E` or `-S` skip PYTHONPATH or site:
 * such a process that loads torch is told so in one line at exit.
 *
 * It never interposes dlopen: glibc resolves
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
#include <unistd.h>

#ifndef LINGPROBE_BUILT_TORCH_CPU
#define LINGPROBE_BUILT_TORCH_CPU ""
#endif

static int attach_done;
static int is_python;              /* this process is a Python interpreter */
static const char* python_blocker; /* why the shim cannot run here, or NULL */

#ifndef LINGPROBE_SOURCE_PYTHON_SHIM
#define LINGPROBE_SOURCE_PYTHON_SHIM ""
#endif
#ifndef LINGPROBE_SHIM_FROM_LIBDIR
#define LINGPROBE_SHIM_FROM_LIBDIR "../share/lingprobe/python"
#endif

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

static int is_shim_dir(const char* dir) {
  char probe[PATH_MAX];
  return dir && *dir && snprintf(probe, sizeof probe, "%s/sitecustomize.py", dir) < (int)sizeof probe &&
         access(probe, R_OK) == 0;
}

/* LINGPROBE_PYTHON_SHIM, then the install layout beside this stub
 * (LIBDIR/../share/lingprobe/python), then the source tree it was built from. */
static const char* find_python_shim(void) {
  static char found[PATH_MAX];
  const char* env = getenv("LINGPROBE_PYTHON_SHIM");
  if (is_shim_dir(env)) return env;
  Dl_info info;
  if (dladdr((void*)&find_python_shim, &info) && info.dli_fname) {
    char dir[PATH_MAX], candidate[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", info.dli_fname);
    char* slash = strrchr(dir, '/');
    if (slash) {
      *slash = '\0';
      if (snprintf(candidate, sizeof candidate, "%s/%s", dir, LINGPROBE_SHIM_FROM_LIBDIR) < (int)sizeof candidate &&
          realpath(candidate, found) && is_shim_dir(found))
        return found;
    }
  }
  if (is_shim_dir(LINGPROBE_SOURCE_PYTHON_SHIM)) return LINGPROBE_SOURCE_PYTHON_SHIM;
  return NULL;
}

/* The first of -I, -E, -S among the interpreter's own options (before the
 * script, -c or -m), read from /proc/self/cmdline. */
static const char* python_option_blocking_site(void) {
  static char cmdline[8192];
  FILE* f = fopen("/proc/self/cmdline", "rb");
  if (!f) return NULL;
  size_t n = fread(cmdline, 1, sizeof cmdline - 1, f);
  fclose(f);
  cmdline[n] = '\0';
  const char* arg = cmdline + strlen(cmdline) + 1; /* skip argv[0] */
  int skip_next = 0;
  while (arg < cmdline + n) {
    const char* next = arg + strlen(arg) + 1;
    if (skip_next) {
      skip_next = 0;
    } else if (arg[0] != '-' || !strcmp(arg, "-") || !strcmp(arg, "--")) {
      return NULL; /* the script, stdin, or the end of options */
    } else if (arg[1] == '-') {
      skip_next = !strcmp(arg, "--check-hash-based-pycs");
    } else {
      for (const char* c = arg + 1; *c; ++c) {
        if (*c == 'c' || *c == 'm') return NULL;
        if (*c == 'I') return "-I (isolated mode ignores PYTHONPATH and skips site customisation)";
        if (*c == 'E') return "-E (ignores PYTHON* variables, PYTHONPATH among them)";
        if (*c == 'S') return "-S (no site module, so no sitecustomize)";
        if (*c == 'W' || *c == 'X') {
          skip_next = c[1] == '\0';
          break;
        }
      }
    }
    arg = next;
  }
  return NULL;
}

static int path_has_entry(const char* list, const char* entry) {
  size_t len = strlen(entry);
  for (const char* p = list; p && *p;) {
    const char* end = strchr(p, ':');
    size_t n = end ? (size_t)(end - p) : strlen(p);
    if (n == len && strncmp(p, entry, len) == 0) return 1;
    p = end ? end + 1 : NULL;
  }
  return 0;
}

/* Python only: the shim first on PYTHONPATH, remembering what was there. */
static void arrange_python_shim(void) {
  if (!dlsym(RTLD_DEFAULT, "Py_BytesMain") && !dlsym(RTLD_DEFAULT, "Py_Main")) return;
  is_python = 1;
  python_blocker = python_option_blocking_site();
  if (python_blocker) return;
  const char* shim = find_python_shim();
  if (!shim) {
    python_blocker = "no python_shim directory found (set LINGPROBE_PYTHON_SHIM to its path)";
    return;
  }
  const char* old = getenv("PYTHONPATH");
  if (old && path_has_entry(old, shim)) return; /* lingprobe run, or a parent that never ran the shim */
  size_t size = strlen(shim) + (old ? strlen(old) : 0) + 2;
  char* value = (char*)malloc(size);
  if (!value) return;
  snprintf(value, size, "%s%s%s", shim, old && *old ? ":" : "", old && *old ? old : "");
  if (old)
    setenv("LINGPROBE_PYTHONPATH_BEFORE", old, 1);
  else
    unsetenv("LINGPROBE_PYTHONPATH_BEFORE");
  setenv("LINGPROBE_SHIM_PATH", shim, 1);
  setenv("PYTHONPATH", value, 1);
  free(value);
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
    fprintf(stderr, "[lingprobe] cannot load %s: %s; recording is off (set LINGPROBE_REAL_LIBRARY)\n", path, dlerror());
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
  if (forward_push && forward_pop)
    forward_push(name);
  else
    ++unforwarded_depth;
}

static void range_pop(void) {
  if (unforwarded_depth > 0)
    --unforwarded_depth;
  else if (forward_pop)
    forward_pop();
}

static const char* ascii_message(const nvtxEventAttributes_t* a) {
  return (a && a->messageType == NVTX_MESSAGE_TYPE_ASCII) ? a->message.ascii : NULL;
}

static int NVTX_API nvtx_range_push_a(const char* message) {
  range_push(message);
  return 0;
}
static int NVTX_API nvtx_range_push_w(const wchar_t* message) {
  (void)message;
  range_push(NULL);
  return 0;
}
static int NVTX_API nvtx_range_push_ex(const nvtxEventAttributes_t* a) {
  range_push(ascii_message(a));
  return 0;
}
static int NVTX_API nvtx_range_pop(void) {
  range_pop();
  return 0;
}
static int NVTX_API nvtx_domain_range_push_ex(nvtxDomainHandle_t d, const nvtxEventAttributes_t* a) {
  (void)d;
  range_push(ascii_message(a));
  return 0;
}
static int NVTX_API nvtx_domain_range_pop(nvtxDomainHandle_t d) {
  (void)d;
  range_pop();
  return 0;
}

static void patch(NvtxFunctionTable table, unsigned size, unsigned slot, NvtxFunctionPointer fn) {
  if (table && slot <= size && table[slot]) *table[slot] = fn;
}

__attribute__((visibility("default"))) int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_export_table) {
  const NvtxExportTableCallbacks* callbacks = (const NvtxExportTableCallbacks*)get_export_table(NVTX_ETID_CALLBACKS);
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
      fprintf(stderr,
              "[lingprobe] NVTX_INJECTION64_PATH is owned by another tool (%s); NVTX ranges will not "
              "set stages (use the stage API, the shim or LINGPROBE_STAGE_MAP)\n",
              current);
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
  arrange_python_shim();
  try_attach();
}

/* A Python process that loaded torch without attaching lingprobe (-I, -E, -S,
 * or the shim not found) says why, once, at exit: earlier it cannot know
 * whether torch will be loaded, and processes without torch stay silent. */
__attribute__((destructor)) static void lingprobe_preload_fini(void) {
  if (!is_python || attach_done) return;
  struct torch_search found;
  memset(&found, 0, sizeof found);
  if (!dl_iterate_phdr(find_torch_cpu, &found)) return;
  void* self_loaded = dlopen("liblingprobe.so.0", RTLD_NOW | RTLD_NOLOAD);
  if (self_loaded) { /* the program attached lingprobe itself (import lingprobe) */
    dlclose(self_loaded);
    return;
  }
  fprintf(stderr,
          "[lingprobe] this Python process loaded torch but lingprobe could not attach: python %s; nothing was "
          "recorded (run it without that option, or call lingprobe.start() from the program)\n",
          python_blocker ? python_blocker
                         : "did not import lingprobe's sitecustomize (is another sitecustomize "
                           "imported before it without chaining?)");
}
