// `lingprobe replay`: reruns one snapshot's call in isolation through the
// dispatcher (the operator found by name and overload, called boxed) under
// the math policy recorded at sampling time, on tensors rebuilt with the
// recorded shape, strides, storage offset and data-pointer alignment, and
// compares the result with the recorded output. Needs no Python and none of
// the run's model code. Writes replays/{stem}/ (replay_comparison.json,
// identity.json, run.log, replay_operator.py, manifest.json).
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "format/json_value.h"
#include "format/status.h"

namespace lingprobe::replay {

struct ReplayOptions {
  std::string device;        // "" : the device the snapshot's tensors were on
  std::string out_dir;       // the replay's own folder (replays/{stem}); "" : write nothing
  std::string snapshot_rel;  // the snapshot's path relative to its run directory (for the reports)
  // Run just before and just after the op's call, around nothing else (`replay --profile`
  // records only the call itself, not the rebuilding of its inputs).
  std::function<void()> before_call, after_call;
};

struct ReplayResult {
  // ok: the call ran and was compared. kUnsupported: not replayable in this
  // process (its op's library is not loaded; skipped, not failed). kBadInput
  // (not a snapshot, an unknown aten op), kFailed (the call raised), kIoFailed
  // (the replay's files): failed. The message says why.
  format::Status status;
  std::string op, stage, device;
  std::optional<bool> exact;  // nullopt: a nondeterministic op (reason)
  std::string nondeterministic;
  double max_abs = 0, rmse = 0;
  bool finite = true;
  bool signature_matches = false;
  format::JsonValue comparison;  // replay_comparison.json
};

ReplayResult replay_snapshot(const std::string& path, const ReplayOptions& options);

// Why an op's result may differ run to run ("" if it is deterministic under
// the recorded policy): empty* (uninitialised memory), random ops and ops
// given a Generator, cuDNN convolutions with benchmark mode on, CUDA ops
// with atomics while deterministic algorithms are off (docs/SNAPSHOTS.md).
// `training_off`: a dropout called with train=False (a model in eval), which
// returns its input.
std::string nondeterminism(const std::string& op_name, const std::string& device_type, bool cudnn_benchmark,
                           bool deterministic_algorithms, bool has_generator, bool training_off);

// The standalone plain-PyTorch replay script (torch.load + torch.ops) for a snapshot, to be written into
// `script_dir` (which exists): it finds the snapshot relative to its own directory.
std::string replay_operator_script(const std::string& snapshot_path, const std::string& script_dir);

}  // namespace lingprobe::replay
