/* Loads liborigin_b.so, which only this library's RUNPATH ($ORIGIN/origin_sub)
 * can find: the way libtorch_cuda loads cuDNN's engine libraries. A dlopen
 * interposer in LD_PRELOAD breaks this (the search uses the caller's RUNPATH). */
#include <dlfcn.h>

__attribute__((visibility("default"))) int origin_a_load(void) { return dlopen("liborigin_b.so", RTLD_NOW) != 0; }
