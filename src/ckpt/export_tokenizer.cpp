// The tokenizer files of a Hugging Face export; see export_tokenizer.h.
#include "export_tokenizer.h"

#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>
#include <sentencepiece_processor.h>

#include "fsdp/core/error.h"
#include "fsdp/core/regular_file.h"

namespace fsdp::ckpt::detail {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// A regular file only: a FIFO given as --tokenizer once hung the export, and a directory
// surfaced as "basic_filebuf::underflow error reading the file".
std::string read_file(const std::string& path, const char* what) {
  try {
    return read_regular_file(path);
  } catch (const Error& e) {
    FSDP_FAIL("{}: {}", what, e.what());
  }
}

// What LlamaTokenizer (and AutoTokenizer, through its fast converter) needs: the class, the
// special pieces, and BOS prepended as Llama 2 was trained. legacy=true keeps transformers'
// encoding identical to a plain sentencepiece Encode (what `prepare` tokenized with).
TokenizerFiles sentencepiece_files(const std::string& path, const model::LlamaConfig& cfg) {
  TokenizerFiles t;
  const std::string bytes = read_file(path, "tokenizer model");
  sentencepiece::SentencePieceProcessor sp;
  const auto status = sp.LoadFromSerializedProto(bytes);
  FSDP_CHECK(status.ok(), "tokenizer model {} does not load as a sentencepiece model: {}", path, status.ToString());
  t.vocab_size = sp.GetPieceSize();
  t.bos_id = sp.bos_id(), t.eos_id = sp.eos_id();
  const auto token = [&](int id) { return id >= 0 ? json(sp.IdToPiece(id)) : json(nullptr); };
  const json config = {{"tokenizer_class", "LlamaTokenizer"},
                       {"bos_token", token(sp.bos_id())},
                       {"eos_token", token(sp.eos_id())},
                       {"unk_token", token(sp.unk_id())},
                       {"pad_token", token(sp.pad_id())},
                       {"add_bos_token", sp.bos_id() >= 0},
                       {"add_eos_token", false},
                       {"legacy", true},
                       {"clean_up_tokenization_spaces", false},
                       {"model_max_length", cfg.max_seq_len},
                       {"sp_model_kwargs", json::object()}};
  t.files["tokenizer.model"] = bytes;
  t.files["tokenizer_config.json"] = config.dump(2) + "\n";
  return t;
}

json parse(const std::string& text, const std::string& path) {
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    FSDP_FAIL("{}: not JSON (byte {})", path, e.byte);
  } catch (const json::exception&) {  // out_of_range: 1e999
    FSDP_FAIL("{}: holds a number too large for a double (e.g. 1e999)", path);
  }
}

// The id of a special token as tokenizer_config.json names it (a string or {"content": ...}).
int64_t id_of(const json& token, const json& tok, const std::string& config_path, const char* key) {
  std::string content;
  if (token.is_string()) content = token.get<std::string>();
  else if (token.is_object() && token.contains("content") && token["content"].is_string())
    content = token["content"].get<std::string>();
  else return -1;
  if (tok.contains("added_tokens") && tok["added_tokens"].is_array())
    for (const json& a : tok["added_tokens"])
      if (a.is_object() && a.value("content", "") == content && a.contains("id") && a["id"].is_number_integer())
        return a["id"].get<int64_t>();
  const json& vocab = tok["model"]["vocab"];
  if (vocab.contains(content) && vocab[content].is_number_integer()) return vocab[content].get<int64_t>();
  FSDP_FAIL("{}: {} \"{}\" is not a token of the tokenizer.json beside it", config_path, key, content);
}

TokenizerFiles huggingface_files(const std::string& path) {
  TokenizerFiles t;
  const std::string bytes = read_file(path, "tokenizer.json");
  const json tok = parse(bytes, path);
  FSDP_CHECK(tok.is_object() && tok.contains("model") && tok["model"].is_object() && tok["model"].contains("vocab") &&
                 tok["model"]["vocab"].is_object(),
             "{}: not a Hugging Face tokenizer.json (no model.vocab)", path);
  for (const auto& item : tok["model"]["vocab"].items())
    if (item.value().is_number_integer()) t.vocab_size = std::max(t.vocab_size, item.value().get<int64_t>() + 1);
  if (tok.contains("added_tokens") && tok["added_tokens"].is_array())
    for (const json& a : tok["added_tokens"])
      if (a.is_object() && a.contains("id") && a["id"].is_number_integer())
        t.vocab_size = std::max(t.vocab_size, a["id"].get<int64_t>() + 1);
  t.files["tokenizer.json"] = bytes;
  const fs::path dir = fs::path(path).parent_path();
  for (const char* name : {"tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja", "chat_template.json"}) {
    std::error_code ec;
    if (fs::exists(dir / name, ec)) t.files[name] = read_file((dir / name).string(), name);
  }
  if (const auto it = t.files.find("tokenizer_config.json"); it != t.files.end()) {
    const std::string config_path = (dir / "tokenizer_config.json").string();
    const json config = parse(it->second, config_path);
    FSDP_CHECK(config.is_object(), "{}: expected a JSON object", config_path);
    if (config.contains("bos_token")) t.bos_id = id_of(config["bos_token"], tok, config_path, "bos_token");
    if (config.contains("eos_token")) t.eos_id = id_of(config["eos_token"], tok, config_path, "eos_token");
  }
  return t;
}

}  // namespace

TokenizerFiles read_export_tokenizer(const std::string& path, const model::LlamaConfig& cfg) {
  if (fs::path(path).extension() == ".json") return huggingface_files(path);
  return sentencepiece_files(path, cfg);
}

}  // namespace fsdp::ckpt::detail
