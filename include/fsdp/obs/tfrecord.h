// TFRecord framing, the container of TensorBoard event files (TensorFlow's
// core/lib/io/record_writer.cc; read by tensorboard's event_file_loader):
//
//   uint64 length (little-endian) | uint32 masked_crc32c(the 8 length bytes)
//   | length bytes of data | uint32 masked_crc32c(data)
//
// crc32c is CRC-32C (Castagnoli: reflected polynomial 0x82F63B78, initial value and final
// xor 0xFFFFFFFF; crc32c("123456789") = 0xE3069283, RFC 3720 B.4), and
// masked(c) = ((c >> 15) | (c << 17)) + 0xA282EAD8.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace fsdp::obs::tfrecord {

uint32_t crc32c(const void* data, size_t n);
uint32_t masked_crc32c(const void* data, size_t n);
// One record holding `payload`, framed as above.
std::string frame(std::string_view payload);

}  // namespace fsdp::obs::tfrecord
