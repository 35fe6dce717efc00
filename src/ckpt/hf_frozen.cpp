// A Hugging Face folder, plain or bitsandbytes-quantized, as a frozen base; see hf_frozen.h.
#include "fsdp/ckpt/hf_frozen.h"

#include <unistd.h>

#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "fsdp/ckpt/hf_import.h"
#include "fsdp/core/error.h"
#include "fsdp/core/json_file.h"
#include "fsdp/core/regular_file.h"

namespace fsdp::ckpt {

namespace {

using nlohmann::json;

const char* const kQuantState = ".quant_state.bitsandbytes__nf4";

// The slot as the importer's slot type (hf_source_of takes one).
model::ParamSlot as_param_slot(const model::FrozenSlot& s) {
  model::ParamSlot p;
  p.name = s.name;
  p.hf_name = s.hf_name;
  p.hf_fused_name = s.hf_fused_name;
  p.hf_fused_offset = s.hf_fused_offset;
  p.hf_fused_shape = s.hf_fused_shape;
  p.shape = s.shape;
  p.numel = s.numel;
  p.tp = s.tp;
  return p;
}

DType value_dtype_named(const std::string& name, const std::string& where) {
  if (name == "float32") return DType::F32;
  if (name == "bfloat16") return DType::BF16;
  if (name == "float16") return DType::F16;
  FSDP_FAIL("{}: quant_state dtype '{}' is not float32, bfloat16 or float16", where, name);
}

// The quant_state JSON of a bitsandbytes weight, checked against what we implement.
json quant_state_of(const SafetensorsFolder& folder, const std::string& hf_name) {
  const TensorEntry& e = folder.entry(hf_name + kQuantState);
  const json j = json_file::parse(std::string_view(reinterpret_cast<const char*>(e.data), e.nbytes),
                                  fmt::format("{}: tensor '{}{}'", e.file, hf_name, kQuantState));
  const std::string where = e.file + ": " + hf_name;
  FSDP_CHECK(j.value("quant_type", std::string()) == "nf4", "{}: quant_type '{}' is not supported (nf4 only)", where,
             j.value("quant_type", std::string()));
  FSDP_CHECK(j.value("blocksize", 0) == kNf4BlockSize, "{}: blocksize {} is not supported (64 only)", where,
             j.value("blocksize", 0));
  FSDP_CHECK(j.contains("nested_offset") && j.value("nested_blocksize", 0) == kNf4NestedBlockSize,
             "{}: not double-quantized with blocks of 256 (bnb_4bit_use_double_quant: true is the only layout "
             "supported)",
             where);
  return j;
}

// Copies a stored piece's bytes (any dtype) into `out`, which must hold exactly as many.
void copy_piece(const SafetensorsFolder& folder, const std::string& name, const Tensor& out) {
  FSDP_CHECK(folder.contains(name), "{}: missing tensor '{}' of a bitsandbytes 4-bit weight", folder.dir(), name);
  const TensorEntry& e = folder.entry(name);
  FSDP_CHECK(e.nbytes == out.nbytes(), "{}: tensor '{}' holds {} bytes, expected {}", e.file, name, e.nbytes,
             out.nbytes());
  std::memcpy(out.data_ptr(), e.data, e.nbytes);
}

}  // namespace

bool HfFrozenSource::nf4_pieces(const model::FrozenSlot& s, const Nf4Tensors& out) {
  if (!folder_.contains(s.hf_name + kQuantState)) return false;
  const json j = quant_state_of(folder_, s.hf_name);
  const std::string where = folder_.dir() + ": " + s.hf_name;
  const std::vector<int64_t> shape = j.value("shape", std::vector<int64_t>{});
  FSDP_CHECK(shape == std::vector<int64_t>(s.shape.begin(), s.shape.end()),
             "{}: quant_state shape [{}] but the model expects {}", where, fmt::join(shape, ", "), s.shape.str());
  const DType dtype = value_dtype_named(j.value("dtype", std::string()), where);
  FSDP_CHECK(dtype == s.dtype, "{}: quantized from {}, but the base's first weight was {} (one dtype for all)", where,
             dtype_name(dtype), dtype_name(s.dtype));
  copy_piece(folder_, s.hf_name, out.packed);
  copy_piece(folder_, s.hf_name + ".absmax", out.absmax);
  copy_piece(folder_, s.hf_name + ".nested_absmax", out.nested_absmax);
  copy_piece(folder_, s.hf_name + ".nested_quant_map", out.nested_code);
  copy_piece(folder_, s.hf_name + ".quant_map", out.code);
  out.offset.data<float>()[0] = j.at("nested_offset").get<float>();
  return true;
}

void HfFrozenSource::values(const model::FrozenSlot& s, int64_t first, const Tensor& out) {
  check_dtype(out, DType::F32, "out");
  FSDP_CHECK(first >= 0 && first + out.numel() <= s.numel, "values {}..{} of {} ({} elements)", first,
             first + out.numel(), s.name, s.numel);
  if (folder_.contains(s.hf_name + kQuantState)) {
    // A bitsandbytes weight read as values: dequantized whole, then the range (of the
    // slice, under tensor parallelism).
    model::FrozenSlot q = s;
    q.shape = s.whole_shape();
    q.numel = q.shape.numel();
    q.tp = {};
    q.dtype = value_dtype_named(quant_state_of(folder_, s.hf_name).value("dtype", std::string()), s.hf_name);
    const int64_t n = q.numel;
    const Nf4Tensors p{Tensor::empty({nf4_packed_bytes(n)}, DType::U8), Tensor::empty({nf4_blocks(n)}, DType::U8),
                       Tensor::empty({nf4_nested_blocks(n)}, DType::F32), Tensor::empty({256}, DType::F32),
                       Tensor::empty({1}, DType::F32), Tensor::empty({16}, DType::F32), Tensor()};
    nf4_pieces(q, p);
    Tensor all = Tensor::empty({n}, DType::F32);
    nf4_dequantize(p, q.dtype, all);
    const Tensor flat = out.reshape({out.numel()});
    model::for_each_whole_run(s.shape, s.tp, first, out.numel(), [&](int64_t at, int64_t whole, int64_t run) {
      flat.narrow(0, at - first, run).copy_(all.narrow(0, whole, run));
    });
    return;
  }
  TensorEntry e = hf_source_of(folder_, as_param_slot(s));
  const std::string name = e.name;
  const int64_t stored_first = (name == s.hf_name ? 0 : s.hf_fused_offset) + first;
  const DType stored = e.dtype == "BF16" ? DType::BF16 : e.dtype == "F16" ? DType::F16 : DType::F32;
  FSDP_CHECK(s.format == model::FrozenFormat::Dense || stored == s.dtype,
             "{}: tensor '{}' is {}, but the base's first weight was {}: NF4 rounds every weight to one dtype", e.file,
             s.hf_name, e.dtype, dtype_name(s.dtype));
  // A tensor-parallel slice (FrozenSlot::tp) reads its elements a run contiguous in the
  // whole tensor at a time: one run, or one per row of a column slice.
  const size_t es = safetensors_dtype_size(e.dtype);
  const int64_t stored_base = stored_first - first;
  model::for_each_whole_run(s.shape, s.tp, first, out.numel(), [&](int64_t at, int64_t whole, int64_t run) {
    TensorEntry part = e;
    part.data += size_t(whole) * es;
    part.nbytes = size_t(run) * es;
    part.shape = {run};
    read_finite_f32(part, name, stored_base + whole, out.data<float>() + (at - first));
  });
}

bool is_bnb_4bit_folder(const std::string& folder) {
  const std::string path = (std::filesystem::path(folder) / "config.json").string();
  std::string why;
  const int fd = open_regular_file(path, why);
  if (fd < 0) return false;  // read_hf_llama_config reports it
  ::close(fd);
  json j;
  try {
    j = json_file::read(path);
  } catch (const Error&) {
    return false;  // read_hf_llama_config reports it
  }
  const json* qp = json_file::find(j, "quantization_config");
  if (qp == nullptr || !qp->is_object()) return false;
  const json& q = *qp;
  // Keys by type, named as config.json nests them ("load_in_8bit": "yes" is refused by its name).
  const std::string where = path + ": quantization_config";
  const std::string method = json_file::string(q, "quant_method", where, "");
  FSDP_CHECK(method == "bitsandbytes", "{}: quantization_config.quant_method '{}' is not supported (bitsandbytes nf4 "
             "only)", path, method);
  FSDP_CHECK(!json_file::boolean(q, "load_in_8bit", where, false),
             "{}: bitsandbytes 8-bit (load_in_8bit) is not supported (4-bit nf4 only)", path);
  const std::string type = json_file::string(q, "bnb_4bit_quant_type", where, "fp4");
  FSDP_CHECK(type == "nf4", "{}: bnb_4bit_quant_type '{}' is not supported (nf4 only)", path, type);
  FSDP_CHECK(json_file::boolean(q, "bnb_4bit_use_double_quant", where, false),
             "{}: bnb_4bit_use_double_quant false is not supported (double quantization is the only layout)", path);
  return true;
}

DType base_weight_dtype(const SafetensorsFolder& folder) {
  const std::string name = "model.layers.0.self_attn.q_proj.weight";
  if (folder.contains(name + kQuantState))
    return value_dtype_named(quant_state_of(folder, name).value("dtype", std::string()), folder.dir() + ": " + name);
  FSDP_CHECK(folder.contains(name), "{}: missing tensor '{}'", folder.dir(), name);
  const std::string d = folder.entry(name).dtype;
  return d == "BF16" ? DType::BF16 : d == "F16" ? DType::F16 : DType::F32;
}

}  // namespace fsdp::ckpt
