// A Hugging Face model folder's safetensors files: which file holds each tensor (the index's
// weight_map, model.safetensors, or every *.safetensors), and where a file may be. See
// SafetensorsFolder in safetensors.h.
#include <algorithm>
#include <filesystem>
#include <functional>

#include <nlohmann/json.hpp>

#include "fsdp/ckpt/safetensors.h"
#include "fsdp/core/error.h"
#include "fsdp/core/json_file.h"
#include "fsdp/core/regular_file.h"

namespace fsdp::ckpt {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

bool is_within(const fs::path& p, const fs::path& root) {
  const fs::path rel = p.lexically_relative(root);
  return !rel.empty() && *rel.begin() != "..";
}

// Note [Files of a model folder]
// A file the importer opens must be a file of the model folder: an index.json (a text file
// anyone can write) naming "../../../../etc/passwd" or "/home/other/secret", or a symlink
// in a cloned folder pointing out of it, must not make the importer read files the model
// never shipped. So a name is refused when it is absolute or climbs with "..", and when
// its real path (symlinks resolved) lies outside the folder's real path, with one
// exception: a Hugging Face hub cache snapshot (<cache>/models--org--name/snapshots/<rev>/)
// holds only symlinks into that repository's blobs/ (<...>/models--org--name/blobs/), and
// those are the model's own files. `entry` names the offender for the error.
fs::path inside_folder(const std::string& dir, const std::string& name, const std::function<std::string()>& entry) {
  const fs::path rel(name);
  FSDP_CHECK(!name.empty() && !rel.is_absolute(),
             "{} is {}: a shard must be a file inside the model folder {}", entry(),
             name.empty() ? "empty" : "an absolute path", dir);
  for (const fs::path& part : rel)
    FSDP_CHECK(part != "..", "{} climbs out of the model folder {} with '..': refused", entry(), dir);
  std::error_code ec;
  const fs::path root = fs::canonical(dir, ec);
  FSDP_CHECK(!ec, "model folder {}: {}", dir, ec.message());
  const fs::path real = fs::weakly_canonical(root / rel, ec);
  FSDP_CHECK(!ec, "{}: {}", entry(), ec.message());
  const bool hub_blob = root.parent_path().filename() == "snapshots" &&
                        is_within(real, root.parent_path().parent_path() / "blobs");
  FSDP_CHECK(is_within(real, root) || hub_blob,
             "{} is a symlink to {}, outside the model folder {}: refused (copy the file into the folder)", entry(),
             real.string(), dir);
  return fs::path(dir) / rel;
}

}  // namespace

SafetensorsFolder::SafetensorsFolder(const std::string& dir) : dir_(dir) {
  std::error_code ec;
  FSDP_CHECK(fs::is_directory(dir, ec), "model folder {} does not exist or is not a directory", dir);
  const fs::path index = fs::path(dir) / "model.safetensors.index.json";
  const fs::path single = fs::path(dir) / "model.safetensors";
  std::vector<std::string> others;  // every other *.safetensors of the folder
  for (const auto& item : fs::directory_iterator(dir, ec)) {
    if (item.path().extension() == ".safetensors" && item.path() != single) others.push_back(item.path().string());
  }
  std::sort(others.begin(), others.end());
  if (fs::exists(index, ec)) {
    open_from_index(index.string());
  } else if (fs::exists(single, ec)) {
    // model.safetensors is the model, as for transformers; a file beside it is not read,
    // unless it holds the same tensors: then which copy is meant is anyone's guess (one was
    // once picked without a word).
    open_all({single.string()});
    refuse_other_copies(others);
  } else {
    FSDP_CHECK(!others.empty(), "model folder {} has no model.safetensors.index.json and no *.safetensors file", dir);
    open_all(others);
  }
}

void SafetensorsFolder::refuse_other_copies(const std::vector<std::string>& others) const {
  for (const std::string& path : others) {
    std::unique_ptr<SafetensorsFile> other;
    try {
      other = std::make_unique<SafetensorsFile>(path);
    } catch (const Error&) {
      continue;  // not a safetensors file we could read: nothing of the model comes from it
    }
    for (const std::string& name : other->names()) {
      const auto it = where_.find(name);
      FSDP_CHECK(it == where_.end(),
                 "model folder {}: tensor {} is in both {} and {}, and no model.safetensors.index.json says which to "
                 "use: refusing to pick one (move the other file out of the folder, or add an index)",
                 dir_, name, it->second->path(), path);
    }
  }
}

void SafetensorsFolder::open_from_index(const std::string& index_path) {
  const json index = json_file::read(index_path);
  FSDP_CHECK(index.is_object() && index.contains("weight_map") && index["weight_map"].is_object(),
             "{} has no \"weight_map\" object", index_path);
  const json& weight_map = index["weight_map"];

  std::map<std::string, const SafetensorsFile*> shards;  // shard file name -> opened file
  for (const auto& [tensor, shard] : weight_map.items()) {
    FSDP_CHECK(shard.is_string(), "{}: weight_map entry for tensor {} is not a file name", index_path, tensor);
    const auto shard_name = shard.get<std::string>();
    if (shards.count(shard_name) == 0) {
      // A named copy: clang before 16 cannot capture a structured binding.
      const std::string& tensor_name = tensor;
      const fs::path shard_path = inside_folder(dir_, shard_name, [&] {
        return fmt::format("{}: weight_map entry for tensor {} ('{}')", index_path, tensor_name, shard_name);
      });
      std::error_code ec;
      FSDP_CHECK(fs::exists(shard_path, ec), "shard {} named in {} (for tensor {}) does not exist",
                 shard_path.string(), index_path, tensor);
      files_.push_back(std::make_unique<SafetensorsFile>(shard_path.string()));
      shards[shard_name] = files_.back().get();
    }
    const SafetensorsFile* file = shards[shard_name];
    FSDP_CHECK(file->contains(tensor), "{} places tensor {} in {}, which does not contain it", index_path, tensor,
               file->path());
    where_[tensor] = file;
  }
}

void SafetensorsFolder::open_all(const std::vector<std::string>& paths) {
  for (const auto& path : paths) {
    const std::string name = fs::path(path).filename().string();
    inside_folder(dir_, name, [&] { return fmt::format("model folder {}: {}", dir_, name); });
    files_.push_back(std::make_unique<SafetensorsFile>(path));
    const SafetensorsFile* file = files_.back().get();
    for (const auto& name : file->names()) {
      const auto [it, inserted] = where_.emplace(name, file);
      FSDP_CHECK(inserted,
                 "model folder {}: tensor {} is in both {} and {}, and no model.safetensors.index.json says which to "
                 "use: refusing to pick one (move the other file out of the folder, or add an index)",
                 dir_, name, it->second->path(), file->path());
    }
  }
}

std::vector<std::string> SafetensorsFolder::files() const {
  std::vector<std::string> out;
  for (const auto& f : files_) out.push_back(f->path());
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> SafetensorsFolder::names() const {
  std::vector<std::string> out;
  out.reserve(where_.size());
  for (const auto& [name, file] : where_) out.push_back(name);
  return out;
}

const SafetensorsFile& SafetensorsFolder::file_of(const std::string& name) const {
  const auto it = where_.find(name);
  FSDP_CHECK(it != where_.end(), "tensor {} not found in model folder {} ({} tensors in {} files)", name, dir_,
             where_.size(), files_.size());
  return *it->second;
}

const TensorEntry& SafetensorsFolder::entry(const std::string& name) const { return file_of(name).entry(name); }

}  // namespace fsdp::ckpt
