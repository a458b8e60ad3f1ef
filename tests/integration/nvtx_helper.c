/* Emits real NVTX ranges through the NVTX3 C API (header-only, from the CUDA
 * toolkit), for tests on machines where torch.cuda.nvtx is unavailable.
 * Called from Python through ctypes. */
#include <nvtx3/nvToolsExt.h>

__attribute__((visibility("default"))) int helper_range_push(const char* name) { return nvtxRangePushA(name); }

__attribute__((visibility("default"))) int helper_range_push_ex(const char* name) {
  nvtxEventAttributes_t a = {0};
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.messageType = NVTX_MESSAGE_TYPE_ASCII;
  a.message.ascii = name;
  return nvtxRangePushEx(&a);
}

__attribute__((visibility("default"))) int helper_range_pop(void) { return nvtxRangePop(); }
