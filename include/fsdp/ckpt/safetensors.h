// Reading and writing the safetensors format (https://github.com/huggingface/safetensors), the
// weight format of Hugging Face model folders.
//
// A file is: an 8-byte little-endian u64 N, then N bytes of JSON, then the data region.
// The JSON maps each tensor name to {"dtype": "F32", "shape": [d0, d1, ...],
// "data_offsets": [begin, end]} (offsets relative to the data region, row-major, little-endian
// elements), plus an optional "__metadata__" object of string to string.
//
// Reading maps the file read-only and hands out pointers into the mapping: nothing is copied
// until a caller converts a tensor (read_as_f32 / read_as_i64). Every structural promise of the
// header is checked when the file is opened, so a corrupt or truncated file fails there with a
// message naming the file and the tensor, never later with a wild read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace fsdp::ckpt {

// Bytes per element of a safetensors dtype string ("F32", "BF16", "I64", ...); 0 if the dtype is
// unknown or packs several elements per byte (F4, F6_*), which this reader does not support.
size_t safetensors_dtype_size(const std::string& dtype);

// One tensor of an open file. `data` points into the file's mapping and lives as long as the
// SafetensorsFile (or SafetensorsFolder) it came from. It is aligned only as the writer aligned
// it; the converters below copy with memcpy and do not care.
struct TensorEntry {
  std::string name;            // tensor name, for messages
  std::string file;            // path of the file holding it, for messages
  std::string dtype;           // "F32", "BF16", "F16", "F64", "I64", "I32", "U8", "BOOL", ...
  std::vector<int64_t> shape;  // [] is a scalar (one element)
  const std::byte* data = nullptr;
  size_t nbytes = 0;           // == numel() * safetensors_dtype_size(dtype), checked on open

  int64_t numel() const;
};

// Converts a F32, BF16, F16 or F64 tensor to float; `out` holds entry.numel() floats.
// BF16 and F16 convert exactly (subnormals, infinities and NaNs included); F64 rounds to nearest.
// Any other dtype is an error naming it.
void read_as_f32(const TensorEntry& entry, float* out);
std::vector<float> read_as_f32(const TensorEntry& entry);

// Converts an I64 or I32 tensor to int64_t; `out` holds entry.numel() values.
void read_as_i64(const TensorEntry& entry, int64_t* out);
std::vector<int64_t> read_as_i64(const TensorEntry& entry);

// One .safetensors file, memory-mapped read-only and validated on open.
class SafetensorsFile {
 public:
  // Header limit: the format caps the JSON header at 100 MB so a corrupt length cannot make a
  // reader allocate or parse gigabytes.
  static constexpr uint64_t kMaxHeaderBytes = 100'000'000;

  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(SafetensorsFile&& other) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&& other) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  std::vector<std::string> names() const;  // sorted
  bool contains(const std::string& name) const { return entries_.count(name) != 0; }
  const TensorEntry& entry(const std::string& name) const;  // missing name: error naming file + name
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  void parse_header(uint64_t header_len);
  void unmap() noexcept;

  std::string path_;
  void* map_ = nullptr;
  size_t map_size_ = 0;
  std::map<std::string, TensorEntry> entries_;  // std::map: entries keep their address on move
  std::map<std::string, std::string> metadata_;
};

// A Hugging Face model folder. With model.safetensors.index.json, its weight_map says which
// shard holds each tensor (only those shards are opened; a missing one is an error naming it).
// Without an index, the folder's model.safetensors if there is one (what transformers loads),
// else every *.safetensors in it; a tensor name found in two files is an error, a file beside
// model.safetensors that holds one of its tensors included (which copy is meant is unknowable).
class SafetensorsFolder {
 public:
  explicit SafetensorsFolder(const std::string& dir);

  const std::string& dir() const { return dir_; }
  std::vector<std::string> files() const;  // paths of the opened files, sorted
  std::vector<std::string> names() const;  // every tensor, sorted
  bool contains(const std::string& name) const { return where_.count(name) != 0; }
  const TensorEntry& entry(const std::string& name) const;  // missing name: error naming folder + name
  const SafetensorsFile& file_of(const std::string& name) const;

 private:
  void open_from_index(const std::string& index_path);
  void open_all(const std::vector<std::string>& paths);
  // Beside model.safetensors (no index): a file holding one of its tensors is an error.
  void refuse_other_copies(const std::vector<std::string>& others) const;

  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const SafetensorsFile*> where_;
};

// One tensor to write: `nbytes` bytes at `data`, which must equal numel(shape) * dtype size.
struct WriteEntry {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  size_t nbytes = 0;
};

// What write_safetensors wrote: the file's size and the CRC-32 (zlib's) of all its bytes, so a
// checkpoint manifest can record them without reading the file back.
struct WrittenFile {
  uint64_t bytes = 0;
  uint32_t crc32 = 0;
};

// Writes a safetensors file crash-safely: to `path + ".tmp"`, fsync, rename over `path`, fsync
// the directory. The header is padded with spaces to a multiple of 8 bytes, and tensors are laid
// out widest dtype first (in the given order otherwise), so every tensor is aligned to its
// element size within the file, as the format recommends.
WrittenFile write_safetensors(const std::string& path, const std::vector<WriteEntry>& entries,
                              const std::map<std::string, std::string>& metadata = {});

// CRC-32 of `size` bytes continuing from `crc` (0 to start), computed in parallel chunks
// joined with crc32_combine: the same value as zlib's crc32 over the whole buffer.
uint32_t crc32_parallel(const void* data, size_t size, uint32_t crc = 0);
// The CRC-32 of a concatenation from the CRCs of its two parts (zlib's crc32_combine):
// ranks that each hold a piece of a buffer agree on the whole buffer's CRC.
uint32_t crc32_concat(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);

}  // namespace fsdp::ckpt
