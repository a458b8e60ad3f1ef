// A snapshot's values turned back into the IValues of a call (SPEC section
// 4): tensors rebuilt with their recorded shape, strides, storage offset and
// alignment on the recorded device (or the one asked for), lists and
// optionals typed by the op's schema.
#pragma once

#include "capture/torch_guard.h"

#include <ATen/ATen.h>

#include <sstream>
#include <string>

#include "format/pickle.h"
#include "format/snapshot_file.h"

namespace lingprobe::replay {

// What rebuilding a snapshot's values needs: the archive, the target device, and the log of what was changed.
struct RebuildContext {
  const format::SnapshotReader* reader;
  std::string device;     // target device, "" : as recorded
  bool keep_cpu = false;  // the snapshot has CUDA tensors: --device leaves its CPU tensors alone
  std::ostringstream log;
  bool layout_exact = true;
};

// The value as the schema's `type` expects it (nullptr: inferred). Throws std::runtime_error for a value it cannot
// rebuild.
c10::IValue rebuild(RebuildContext& ctx, const format::PickleValue& v, const c10::TypePtr& type);

// Whether the document holds a CUDA tensor anywhere.
bool has_cuda_tensor(const format::PickleValue& v);

// The ScalarType of a Python dtype name ("torch.bfloat16"); throws for an unknown one.
c10::ScalarType scalar_type_of(const std::string& name);

}  // namespace lingprobe::replay
