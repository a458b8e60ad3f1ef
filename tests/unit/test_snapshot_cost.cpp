// Which way a sampled call's device copies go (capture/snapshot_cost): the
// host route of a call whose copies could never fit the device budget, the
// pinned buffer it asks for, and the outputs checked against that buffer
// together with the inputs before any copy (a cast to a wider dtype once
// copied its input into a buffer that then had no room for its output, and
// failed so at every retry of its key).
#include "capture/snapshot_cost.h"  // torch's headers first: Catch's CHECK must win over glog's

#include <catch2/catch.hpp>

#include <utility>
#include <vector>

using namespace lingprobe::capture;

namespace {

struct AskingDevice : DeviceAccess {
  std::vector<std::pair<int, uint64_t>> asked;
  Capture stream_capture(void*) override { return Capture::None; }
  std::shared_ptr<void> relax_capture_mode() override { return nullptr; }
  std::unique_ptr<DeviceTransfer> transfer(int, void*, const void*, size_t, std::string&) override { return nullptr; }
  std::unique_ptr<CounterWindow> open_counters(int, void*, std::string&) override { return nullptr; }
  std::unique_ptr<CounterWindow> open_timing(int, void*, std::string&) override { return nullptr; }
  void counter_call_ended(int) override {}
  bool settling_after_window(int) const override { return false; }
  void want_host_buffer(int device, uint64_t nbytes) override { asked.emplace_back(device, nbytes); }
};

TensorsCost on_device(uint64_t bytes, int device) {
  TensorsCost c;
  c.bytes = c.device_bytes = bytes;
  c.device = device;
  return c;
}

}  // namespace

TEST_CASE("host route: only a call whose copies could never fit the device budget takes it", "[capture]") {
  SampleKey key;
  CHECK(host_route_bytes(&key, on_device(96, 2), 64) == 96);
  CHECK(host_route_bytes(&key, on_device(64, 2), 64) == 0);  // fits with nothing in flight: the device route
  CHECK(host_route_bytes(nullptr, on_device(96, 2), 100) == 0);
  AskingDevice device;
  ask_for_host_buffer(device, &key, on_device(96, 2), 1000);   // the outputs unknown yet: twice the inputs
  ask_for_host_buffer(device, &key, on_device(900, 2), 1000);  // at most the snapshot limit
  CHECK(device.asked == std::vector<std::pair<int, uint64_t>>{{2, 192}, {2, 1000}});
}

TEST_CASE("host route: the outputs must fit the buffer with the inputs, else the key asks for both", "[capture]") {
  SampleKey key;
  AskingDevice device;
  // inputs 64 in a buffer of 128 (twice the inputs): a 64-byte output fits, a 128-byte one does not
  CHECK(outputs_fit(&device, &key, 64, on_device(64, 3), 128, 1000));
  CHECK(device.asked.empty());
  CHECK_FALSE(outputs_fit(&device, &key, 64, on_device(128, 3), 128, 1000));
  CHECK(key.device_copy_bytes.load() == 192);
  CHECK(key.device_copy_device.load() == 3);
  CHECK(device.asked == std::vector<std::pair<int, uint64_t>>{{3, 192}});
  // the key's next call takes the host route with the whole, also one whose inputs are not on a device (a factory
  // op), and asks on the device its copies were on, never on device 0 by default
  TensorsCost cpu_inputs;
  CHECK(host_route_bytes(&key, cpu_inputs, 64) == 192);
  ask_for_host_buffer(device, &key, cpu_inputs, 1000);
  CHECK(device.asked.back() == std::pair<int, uint64_t>{3, 192});
  SampleKey fresh;  // nothing known and no device: no ask at all
  ask_for_host_buffer(device, &fresh, cpu_inputs, 1000);
  CHECK(device.asked.size() == 2);
  // outputs that are not on a device never refuse
  CHECK(outputs_fit(&device, &fresh, 1u << 30, TensorsCost{}, 0, 1000));
}
