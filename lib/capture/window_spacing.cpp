#include "capture/window_spacing.h"

namespace lingprobe::capture {
namespace {

struct LastCounterWindow {
  const WindowSpacing* owner = nullptr;  // several captures may run on one thread (tests): each its own
  uint64_t thread_call = 0;
};
thread_local LastCounterWindow t_last;

}  // namespace

void WindowSpacing::counter_window_opened(uint64_t thread_call) { t_last = {this, thread_call}; }

bool WindowSpacing::follows_counter_window(uint64_t thread_call) const {
  return thread_call != 0 && t_last.owner == this && t_last.thread_call != 0 && thread_call == t_last.thread_call + 1;
}

}  // namespace lingprobe::capture
