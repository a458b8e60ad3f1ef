// CRC-32 (ISO 3309, the one ZIP uses), slicing-by-8: about 1-2 GB/s, enough
// to checksum snapshot tensors as they stream to disk. Pure.
#pragma once

#include <cstddef>
#include <cstdint>

namespace lingprobe::format {

// Continues `crc` (0 to start) over `n` bytes.
uint32_t crc32_update(uint32_t crc, const void* data, size_t n);

}  // namespace lingprobe::format
