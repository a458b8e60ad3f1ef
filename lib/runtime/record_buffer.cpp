#include "runtime/record_buffer.h"

namespace lingprobe::runtime {

RecordBuffer::RecordBuffer(size_t min_capacity) {
  size_t c = 16;
  while (c < min_capacity) c <<= 1;
  capacity_ = c;
  mask_ = c - 1;
  slots_.reset(new CallRecord[c]);
}

}  // namespace lingprobe::runtime
