// One way to fail: a code that callers switch on, and a message for people.
// Never classify a failure by searching its message. Header only, no
// dependencies (the base layer). The C ABI reports a configuration's failure,
// whatever its code, as LINGPROBE_ERROR_INVALID_CONFIG (capi/lingprobe_capi.cpp).
#pragma once

#include <string>
#include <utility>

namespace lingprobe::format {

enum class StatusCode {
  kOk,
  kBusy,         // transient: the resource is in use now; a later attempt may succeed (hardware busy, a lock held)
  kHeld,         // another tool holds what this needs (CUPTI's subscriber, the counters)
  kUnsupported,  // cannot work in this process (no privileges, not supported here, not built)
  kTooLarge,     // over a size limit or budget
  kIoFailed,     // a read or write failed
  kNoSpace,      // a write failed because the disk is full (ENOSPC)
  kBadInput,     // malformed input (a name, a file)
  kFailed,       // anything else
};

class [[nodiscard]] Status {
 public:
  Status() = default;  // ok
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status Ok() { return {}; }
  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

}  // namespace lingprobe::format
