// Included first by every translation unit that includes ATen/c10 headers.
// at::RecordFunction (and other ATen classes) change layout with NDEBUG, and
// libtorch is built with it: a TU compiled without NDEBUG reads garbage from
// RecordFunction::inputs() (SPEC section 5). CMake adds -DNDEBUG to these TUs
// in every build type; this guard makes a mistake a compile error.
#pragma once

#ifndef NDEBUG
#error "lingprobe: translation units that include ATen/c10 headers must be compiled with -DNDEBUG (see SPEC section 5)"
#endif
