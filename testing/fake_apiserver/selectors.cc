#include "testing/fake_apiserver/selectors.h"

#include <algorithm>

#include "base/strings.h"

namespace prism::fakeapi {
namespace {

using Json = nlohmann::json;

// Splits at commas that are not inside parentheses.
std::vector<std::string> SplitTopLevel(std::string_view text) {
  std::vector<std::string> out;
  std::string current;
  int depth = 0;
  for (char c : text) {
    if (c == '(') ++depth;
    if (c == ')') --depth;
    if (c == ',' && depth == 0) {
      out.push_back(current);
      current.clear();
    } else {
      current.push_back(c);
    }
  }
  out.push_back(current);
  return out;
}

bool ValidLabelKey(std::string_view key) {
  if (key.empty() || key.size() > 317) return false;
  for (char c : key) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_' || c == '.' || c == '/';
    if (!ok) return false;
  }
  return true;
}

bool ValidLabelValue(std::string_view value) {
  if (value.size() > 63) return false;
  for (char c : value) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_' || c == '.';
    if (!ok) return false;
  }
  return true;
}

std::string FieldValue(const Json& object, const std::vector<std::string>& path) {
  const Json* node = &object;
  for (const std::string& key : path) {
    if (!node->is_object()) return "";
    auto it = node->find(key);
    if (it == node->end()) return "";
    node = &*it;
  }
  if (node->is_string()) return node->get<std::string>();
  if (node->is_boolean()) return node->get<bool>() ? "true" : "false";
  if (node->is_number()) return node->dump();
  return "";
}

}  // namespace

absl::StatusOr<LabelSelector> LabelSelector::Parse(std::string_view text) {
  LabelSelector selector;
  if (StripWhitespace(text).empty()) return selector;
  for (const std::string& raw : SplitTopLevel(text)) {
    std::string_view req = StripWhitespace(raw);
    auto bad = [&](std::string_view why) {
      return absl::InvalidArgumentError(
          StrCat("unable to parse requirement '", req, "' in label selector '", text, "': ", why));
    };
    if (req.empty()) return bad("empty requirement");
    Requirement r;
    size_t space = req.find(' ');
    std::string_view op_word;
    if (space != std::string_view::npos) {
      std::string_view rest = StripWhitespace(req.substr(space));
      if (rest.rfind("notin", 0) == 0) {
        op_word = "notin";
      } else if (rest.rfind("in", 0) == 0) {
        op_word = "in";
      }
    }
    if (!op_word.empty()) {
      r.key = std::string(StripWhitespace(req.substr(0, space)));
      r.op = op_word == "in" ? Op::kIn : Op::kNotIn;
      std::string_view rest =
          StripWhitespace(StripWhitespace(req.substr(space)).substr(op_word.size()));
      if (rest.size() < 2 || rest.front() != '(' || rest.back() != ')') {
        return bad("set values must be in parentheses");
      }
      for (std::string_view v : StrSplit(rest.substr(1, rest.size() - 2), ',')) {
        std::string value(StripWhitespace(v));
        if (!ValidLabelValue(value)) return bad(StrCat("invalid label value '", value, "'"));
        r.values.push_back(value);
      }
    } else if (size_t pos = req.find("!="); pos != std::string_view::npos) {
      r.key = std::string(StripWhitespace(req.substr(0, pos)));
      r.op = Op::kNotEquals;
      r.values.push_back(std::string(StripWhitespace(req.substr(pos + 2))));
    } else if (size_t eq = req.find("=="); eq != std::string_view::npos) {
      r.key = std::string(StripWhitespace(req.substr(0, eq)));
      r.op = Op::kEquals;
      r.values.push_back(std::string(StripWhitespace(req.substr(eq + 2))));
    } else if (size_t single = req.find('='); single != std::string_view::npos) {
      r.key = std::string(StripWhitespace(req.substr(0, single)));
      r.op = Op::kEquals;
      r.values.push_back(std::string(StripWhitespace(req.substr(single + 1))));
    } else if (req.front() == '!') {
      r.key = std::string(StripWhitespace(req.substr(1)));
      r.op = Op::kNotExists;
    } else {
      r.key = std::string(req);
      r.op = Op::kExists;
    }
    if (!ValidLabelKey(r.key)) return bad(StrCat("invalid label key '", r.key, "'"));
    for (const std::string& v : r.values) {
      if (!ValidLabelValue(v)) return bad(StrCat("invalid label value '", v, "'"));
    }
    selector.requirements_.push_back(std::move(r));
  }
  return selector;
}

bool LabelSelector::Matches(const Json& object) const {
  const Json* labels = nullptr;
  if (object.is_object()) {
    auto meta = object.find("metadata");
    if (meta != object.end() && meta->is_object()) {
      auto it = meta->find("labels");
      if (it != meta->end() && it->is_object()) labels = &*it;
    }
  }
  for (const Requirement& r : requirements_) {
    std::optional<std::string> value;
    if (labels != nullptr) {
      auto it = labels->find(r.key);
      if (it != labels->end() && it->is_string()) value = it->get<std::string>();
    }
    auto in_values = [&] {
      return value.has_value() &&
             std::find(r.values.begin(), r.values.end(), *value) != r.values.end();
    };
    bool ok = false;
    switch (r.op) {
      case Op::kExists:
        ok = value.has_value();
        break;
      case Op::kNotExists:
        ok = !value.has_value();
        break;
      case Op::kEquals:
      case Op::kIn:
        ok = in_values();
        break;
      case Op::kNotEquals:
      case Op::kNotIn:
        ok = !in_values();
        break;
    }
    if (!ok) return false;
  }
  return true;
}

absl::StatusOr<FieldSelector> FieldSelector::Parse(std::string_view text,
                                                   const std::vector<std::string>& allowed) {
  FieldSelector selector;
  if (StripWhitespace(text).empty()) return selector;
  for (std::string_view raw : StrSplit(text, ',')) {
    std::string_view req = StripWhitespace(raw);
    Requirement r;
    std::string_view field;
    if (size_t pos = req.find("!="); pos != std::string_view::npos) {
      field = req.substr(0, pos);
      r.equals = false;
      r.value = std::string(req.substr(pos + 2));
    } else if (size_t eq = req.find("=="); eq != std::string_view::npos) {
      field = req.substr(0, eq);
      r.equals = true;
      r.value = std::string(req.substr(eq + 2));
    } else if (size_t single = req.find('='); single != std::string_view::npos) {
      field = req.substr(0, single);
      r.equals = true;
      r.value = std::string(req.substr(single + 1));
    } else {
      return absl::InvalidArgumentError(
          StrCat("invalid field selector requirement '", req, "': expected field=value"));
    }
    field = StripWhitespace(field);
    if (std::find(allowed.begin(), allowed.end(), field) == allowed.end()) {
      return absl::InvalidArgumentError(StrCat("field label not supported: ", field));
    }
    for (std::string_view piece : StrSplit(field, '.')) r.path.push_back(std::string(piece));
    selector.requirements_.push_back(std::move(r));
  }
  return selector;
}

bool FieldSelector::Matches(const Json& object) const {
  for (const Requirement& r : requirements_) {
    if ((FieldValue(object, r.path) == r.value) != r.equals) return false;
  }
  return true;
}

}  // namespace prism::fakeapi
