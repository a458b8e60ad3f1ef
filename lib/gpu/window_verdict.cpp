#include "gpu/window_verdict.h"

#include <algorithm>
#include <set>
#include <utility>

namespace lingprobe::gpu {

const char* status_name(WindowResult::Status s) {
  switch (s) {
    case WindowResult::Status::Passed: return "passed";
    case WindowResult::Status::Abandoned: return "abandoned";
    case WindowResult::Status::Contaminated: return "contaminated";
    case WindowResult::Status::Unavailable: return "counters_unavailable";
    case WindowResult::Status::Failed: break;
  }
  return "failed";
}

void decide_window(WindowObservations seen, WindowResult& res) {
  // This context's launches, once each, in launch order; others are foreign.
  std::sort(seen.records.begin(), seen.records.end(),
            [](const KernelLaunch& a, const KernelLaunch& b) { return a.correlation < b.correlation; });
  uint32_t last = 0;
  bool graph = seen.graph_launched;
  for (auto& k : seen.records) {
    if (!res.kernels.empty() && k.correlation == last) continue;
    if (k.graph || k.device_launched) graph = true;
    if ((seen.context_id && k.context != seen.context_id) || (seen.stream_id && k.stream != seen.stream_id)) {
      res.foreign.push_back(k.mangled);
      continue;
    }
    last = k.correlation;
    res.kernels.push_back(std::move(k));
  }
  if (!res.reason.empty()) {
    res.status = WindowResult::Status::Failed;
  } else if (seen.taken_over) {
    res.status = WindowResult::Status::Abandoned;
    res.reason =
        "another CUPTI client registered its Activity callbacks during the window (torch.profiler started on "
        "another thread?): the launch records went to it; its tracing was left enabled";
  } else if (seen.hold_timeouts) {
    res.status = WindowResult::Status::Abandoned;
    res.reason = std::to_string(seen.hold_timeouts) + " launch(es) of other threads waited " +
                 std::to_string(kHoldSeconds) + " s for the window to close, then ran inside it";
  } else if (graph) {
    res.status = WindowResult::Status::Abandoned;
    res.reason =
        "a CUDA graph (or a device-side launch) ran inside the window: kernel replay profiles only its first "
        "node";
  } else if (!res.foreign.empty()) {
    res.status = WindowResult::Status::Contaminated;
    res.reason = std::to_string(res.foreign.size()) + " kernel(s) of other streams or contexts ran inside the window";
  } else if (res.ranges != res.kernels.size() || res.dropped_ranges) {
    res.status = WindowResult::Status::Contaminated;
    res.reason = std::to_string(res.ranges) + " range(s) for " + std::to_string(res.kernels.size()) +
                 " kernel launch(es) of the op" + (res.dropped_ranges ? " (ranges dropped)" : "");
  } else {
    res.status = WindowResult::Status::Passed;
  }
}

void decide_timing(std::vector<KernelLaunch> records, const std::vector<uint32_t>& own, TimingResult& res) {
  std::set<uint32_t> wanted(own.begin(), own.end()), seen;
  std::set<std::pair<uint32_t, uint64_t>> once;  // (correlation, start): a record delivered twice counts once
  res.launches = static_cast<uint32_t>(own.size());
  bool untimed = false;
  auto has_times = [](const KernelLaunch& k) { return k.start_ns != 0 && k.end_ns > k.start_ns; };
  std::set<uint32_t> timed;  // a launch with a record that has timestamps: another one without them is ignored
  for (const auto& k : records)
    if (has_times(k)) timed.insert(k.correlation);
  for (auto& k : records) {
    if (!wanted.count(k.correlation) || !once.insert({k.correlation, k.start_ns}).second) continue;
    if (!has_times(k) && timed.count(k.correlation)) continue;
    seen.insert(k.correlation);
    untimed = untimed || !has_times(k);
    res.kernels.push_back(std::move(k));
  }
  std::sort(res.kernels.begin(), res.kernels.end(),
            [](const KernelLaunch& a, const KernelLaunch& b) { return a.start_ns < b.start_ns; });
  if (res.reason.empty() && untimed) res.reason = "CUPTI gave a kernel record without timestamps";
  if (res.reason.empty() && seen.size() < wanted.size())
    res.reason = std::to_string(wanted.size() - seen.size()) + " of the op's " + std::to_string(wanted.size()) +
                 " launch(es) have no kernel record (another CUPTI client took the Activity callbacks?)";
  res.passed = res.reason.empty();
}

}  // namespace lingprobe::gpu
