// Runs a cleanup when the scope ends, unless dismissed: a step that acquires
// something declares its undo right after it, and the undos of a failed
// sequence run in reverse order of acquisition, whatever the exit.
#pragma once

#include <utility>

namespace lingprobe::format {

template <typename Undo>
class [[nodiscard]] ScopeGuard {
 public:
  explicit ScopeGuard(Undo undo) : undo_(std::move(undo)) {}
  ScopeGuard(const ScopeGuard&) = delete;
  ScopeGuard& operator=(const ScopeGuard&) = delete;
  ~ScopeGuard() {
    if (armed_) undo_();
  }
  // The step's result is kept: no undo.
  void dismiss() { armed_ = false; }

 private:
  Undo undo_;
  bool armed_ = true;
};

}  // namespace lingprobe::format
