// The post-processors; see post_processors.h.
#include "post_processors.h"

#include <map>
#include <string>

namespace fsdp::data::hf {

namespace {

// The same ids before and after any text: TemplateProcessing's single template, or the cls
// and sep of RobertaProcessing and BertProcessing.
class Wrap final : public PostProcessor {
 public:
  Wrap(std::vector<int32_t> before, std::vector<int32_t> after) : before_(std::move(before)), after_(std::move(after)) {}
  std::vector<int32_t> process(std::vector<int32_t> ids) const override {
    std::vector<int32_t> out;
    out.reserve(before_.size() + ids.size() + after_.size());
    out.insert(out.end(), before_.begin(), before_.end());
    out.insert(out.end(), ids.begin(), ids.end());
    out.insert(out.end(), after_.begin(), after_.end());
    return out;
  }
  void around(std::vector<int32_t>& before, std::vector<int32_t>& after) const override {
    before.insert(before.begin(), before_.begin(), before_.end());
    after.insert(after.end(), after_.begin(), after_.end());
  }

 private:
  std::vector<int32_t> before_, after_;
};

class Sequence final : public PostProcessor {
 public:
  explicit Sequence(std::vector<std::unique_ptr<PostProcessor>> parts) : parts_(std::move(parts)) {}
  std::vector<int32_t> process(std::vector<int32_t> ids) const override {
    for (const auto& p : parts_) ids = p->process(std::move(ids));
    return ids;
  }
  void around(std::vector<int32_t>& before, std::vector<int32_t>& after) const override {
    for (const auto& p : parts_) p->around(before, after);
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> parts_;
};

std::unique_ptr<PostProcessor> template_processing(const JsonNode& node) {
  const JsonNode specials = node.at("special_tokens");
  std::map<std::string, std::vector<int32_t>> ids_of;
  if (!specials.json().is_object()) specials.fail("expected an object");
  for (const auto& item : specials.json().items()) {
    const std::string name = item.key();
    const JsonNode e = specials.at(name);
    const JsonNode ids = e.at("ids");
    std::vector<int32_t> v;
    for (size_t i = 0; i < ids.size(); ++i) v.push_back(int32_t(ids.at(i).integer()));
    ids_of[name] = std::move(v);
  }
  const JsonNode single = node.at("single");
  std::vector<int32_t> before, after;
  bool seen_sequence = false;
  for (size_t i = 0; i < single.size(); ++i) {
    const JsonNode item = single.at(i);
    if (const auto seq = item.get("Sequence")) {
      if (seq->at("id").string() != "A") seq->at("id").fail("a single-text template can only hold sequence A");
      if (seen_sequence) item.fail("sequence A appears twice");
      seen_sequence = true;
    } else if (const auto sp = item.get("SpecialToken")) {
      const std::string id = sp->at("id").string();
      const auto it = ids_of.find(id);
      if (it == ids_of.end()) sp->at("id").fail("\"" + id + "\" is not in special_tokens");
      auto& side = seen_sequence ? after : before;
      side.insert(side.end(), it->second.begin(), it->second.end());
    } else {
      item.fail("expected {\"Sequence\": ...} or {\"SpecialToken\": ...}");
    }
  }
  if (!seen_sequence) single.fail("the template holds no sequence A");
  return std::make_unique<Wrap>(std::move(before), std::move(after));
}

// RobertaProcessing / BertProcessing: "cls": [token, id], "sep": [token, id].
int32_t pair_id(const JsonNode& node) {
  if (!node.json().is_array() || node.size() != 2) node.fail("expected [token, id]");
  return int32_t(node.at(1).integer());
}

}  // namespace

std::unique_ptr<PostProcessor> make_post_processor(const JsonNode& node) {
  if (node.is_null()) return nullptr;
  const std::string type = node.type();
  if (type == "TemplateProcessing") return template_processing(node);
  if (type == "RobertaProcessing" || type == "BertProcessing")
    return std::make_unique<Wrap>(std::vector<int32_t>{pair_id(node.at("cls"))},
                                  std::vector<int32_t>{pair_id(node.at("sep"))});
  if (type == "ByteLevel") return std::make_unique<Wrap>(std::vector<int32_t>{}, std::vector<int32_t>{});
  if (type == "Sequence") {
    const JsonNode list = node.at("processors");
    std::vector<std::unique_ptr<PostProcessor>> parts;
    for (size_t i = 0; i < list.size(); ++i)
      if (auto p = make_post_processor(list.at(i))) parts.push_back(std::move(p));
    return std::make_unique<Sequence>(std::move(parts));
  }
  node.at("type").unsupported(type);
}

}  // namespace fsdp::data::hf
