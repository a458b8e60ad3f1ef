// Threads against lingprobe in a torch process, through the C ABI: the
// recorder, the stage stacks, sampling and the writer all at once. Built
// plainly it is a ctest case; built under TSan (scripts/sanitize.sh
// tsan-torch) it is the recorder's race check, since the TSan runtime cannot
// be preloaded into an uninstrumented Python.
//
//   recorder_threads OUT_DIR [SECONDS]
//
// Worker threads call ops under their own stages (new signatures and
// snapshots of first sightings all along, nested-call suppression learning);
// one thread stops and restarts recording; the main thread flushes and reads
// stats, forks a child mid-run (whose entry points must answer UNAVAILABLE),
// then finalizes while the workers still call ops, and checks that nothing
// is recorded after finalize. Exit status 0 when every lingprobe call
// returned what it should.
#include <ATen/ATen.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "lingprobe/lingprobe.h"

namespace {

std::atomic<bool> g_stop{false};
std::atomic<bool> g_finalized{false};
std::atomic<int> g_failures{0};

void expect(lingprobe_status s, const char* what) {
  if (s == LINGPROBE_OK) return;
  if (g_finalized.load() && s == LINGPROBE_ERROR_FINALIZED) return;  // the one refusal expected after finalize
  std::fprintf(stderr, "recorder_threads: %s returned %s: %s\n", what, lingprobe_status_string(s),
               lingprobe_last_error());
  g_failures.fetch_add(1);
}

void worker(int k) {
  const at::Tensor w = at::randn({32, 16});
  const std::string stage = "worker" + std::to_string(k % 3);
  for (int64_t i = 0; !g_stop.load(std::memory_order_relaxed); ++i) {
    expect(lingprobe_stage_push(stage.c_str()), "stage_push");
    const at::Tensor x = at::randn({1 + i % 24, 16});
    at::linear(x, w).relu().sum(1);  // nested calls below linear
    at::cat({x, x}).mean();
    if (i % 7 == 0) at::randn({1 + i % 200, 3}).softmax(-1);  // new signatures for a while
    expect(lingprobe_stage_pop(), "stage_pop");
  }
}

void toggler() {
  while (!g_stop.load() && !g_finalized.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    expect(lingprobe_stop(), "stop");
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    expect(lingprobe_start(), "start");
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: recorder_threads OUT_DIR [SECONDS]\n");
    return 2;
  }
  const double seconds = argc > 2 ? std::atof(argv[2]) : 3.0;
  at::manual_seed(0);  // here, not per thread: torch creates its default generator lazily, unsynchronised for TSan
  const char* settings[] = {"SNAPSHOTS=1", "FLUSH_INTERVAL_MS=20"};
  lingprobe_options o{sizeof(lingprobe_options), 0, argv[1], nullptr, settings, 2};
  expect(lingprobe_init(&o), "init");
  expect(lingprobe_start(), "start");
  std::vector<std::thread> threads;
  for (int k = 0; k < 6; ++k) threads.emplace_back(worker, k);
  threads.emplace_back(toggler);
  const auto t0 = std::chrono::steady_clock::now();
  bool forked = false;
  for (;;) {
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (t >= seconds) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    expect(lingprobe_flush(), "flush");
    lingprobe_stats st{};
    st.struct_size = sizeof st;
    expect(lingprobe_get_stats(&st), "get_stats");
    if (!forked && t > seconds / 2) {
      forked = true;
      const pid_t pid = fork();
      if (pid == 0) {  // the child: lingprobe is off, every entry point returns at once, torch works
        at::add(at::ones({3}), 1);
        _exit(lingprobe_start() == LINGPROBE_ERROR_UNAVAILABLE && lingprobe_flush() == LINGPROBE_ERROR_UNAVAILABLE ? 0
                                                                                                                   : 1);
      }
      int status = 0;
      waitpid(pid, &status, 0);
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        std::fprintf(stderr, "recorder_threads: the forked child ended with status %d\n", status);
        g_failures.fetch_add(1);
      }
    }
  }
  g_finalized.store(true);
  expect(lingprobe_finalize(), "finalize");  // the workers still call ops meanwhile
  lingprobe_stats at_finalize{};
  at_finalize.struct_size = sizeof at_finalize;
  expect(lingprobe_get_stats(&at_finalize), "get_stats");
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  if (lingprobe_get_state() != LINGPROBE_STATE_FINALIZED) {
    std::fprintf(stderr, "recorder_threads: not finalized after finalize\n");
    g_failures.fetch_add(1);
  }
  g_stop.store(true);
  for (auto& t : threads) t.join();
  lingprobe_stats st{};
  st.struct_size = sizeof st;
  expect(lingprobe_get_stats(&st), "get_stats");
  if (st.calls_recorded != at_finalize.calls_recorded || st.signatures != at_finalize.signatures) {
    std::fprintf(stderr, "recorder_threads: %llu calls recorded after finalize\n",
                 static_cast<unsigned long long>(st.calls_recorded - at_finalize.calls_recorded));
    g_failures.fetch_add(1);
  }
  std::printf("recorder_threads: %llu calls recorded, %llu signatures, %llu dropped, %d failure(s)\n",
              static_cast<unsigned long long>(st.calls_recorded), static_cast<unsigned long long>(st.signatures),
              static_cast<unsigned long long>(st.dropped), g_failures.load());
  return g_failures.load() == 0 && st.calls_recorded > 0 ? 0 : 1;
}
