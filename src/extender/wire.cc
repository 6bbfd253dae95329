#include "extender/wire.h"

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/status_macros.h"
#include "base/strings.h"
#include "config/quantity.h"
#include "deviceplugin/inventory.h"

namespace prism::extender {
namespace {

absl::StatusOr<Json> ParseObject(std::string_view body, std::string_view what) {
  Json json = Json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) {
    return absl::InvalidArgumentError(StrCat(what, ": request body is not valid JSON"));
  }
  if (!json.is_object()) {
    return absl::InvalidArgumentError(
        StrCat(what, ": expected a JSON object, got ", json.type_name()));
  }
  return json;
}

// A string field that may be absent or null (""), or InvalidArgument if it has another type.
absl::StatusOr<std::string> OptionalString(const Json& object, std::string_view key,
                                           std::string_view what) {
  const Json* field = FindField(object, key);
  if (field == nullptr || field->is_null()) return std::string();
  if (!field->is_string()) {
    return absl::InvalidArgumentError(
        StrCat(what, ".", key, ": expected a string, got ", field->type_name()));
  }
  return field->get<std::string>();
}

}  // namespace

const Json* FindField(const Json& object, std::string_view key) {
  if (!object.is_object()) return nullptr;
  if (auto it = object.find(key); it != object.end()) return &*it;
  for (auto it = object.begin(); it != object.end(); ++it) {
    if (EqualsIgnoreAsciiCase(it.key(), key)) return &*it;
  }
  return nullptr;
}

absl::StatusOr<ExtenderArgs> ParseExtenderArgs(std::string_view body,
                                               const ExtenderLimits& limits) {
  // Count the candidates while parsing and drop those over the limit, so that a request with
  // millions of names never becomes millions of JSON values. NodeNames' strings are taken out
  // of the parser as they come, not stored in the document and copied again (at 5,000
  // candidates the names were most of a call's parse). Depths are nlohmann's: 1 for the
  // top-level keys, 2 for NodeNames' elements, 3 for the objects of Nodes.items.
  std::string top_key;
  std::string nodes_key;
  size_t name_count = 0;
  size_t item_count = 0;
  // Per top-level key spelling that reads as NodeNames (Go matches keys ignoring case): the
  // strings of its array, and its first element that is not a string. A repeated key starts
  // over, as the document keeps the last value.
  struct NameList {
    std::vector<std::string> names;
    size_t elements = 0;
    std::optional<size_t> first_not_a_string;
  };
  std::map<std::string, NameList, std::less<>> name_lists;
  NameList* in_names = nullptr;  // The NodeNames array being parsed.
  const Json::parser_callback_t count = [&](int depth, Json::parse_event_t event, Json& parsed) {
    if (event == Json::parse_event_t::key) {
      if (depth == 1) {
        top_key = parsed.get<std::string>();
        in_names = nullptr;
      }
      if (depth == 2) nodes_key = parsed.get<std::string>();
      return true;
    }
    const bool names_key = EqualsIgnoreAsciiCase(top_key, "NodeNames");
    if (depth == 1 && event == Json::parse_event_t::array_start && names_key) {
      in_names = &name_lists[top_key];
      *in_names = NameList{};
      return true;
    }
    const bool element_done = event == Json::parse_event_t::value ||
                              event == Json::parse_event_t::object_end ||
                              event == Json::parse_event_t::array_end;
    if (depth == 2 && element_done && names_key) {
      if (++name_count > limits.max_nodes) return false;
      if (in_names == nullptr) return true;  // NodeNames is not an array: reported below.
      const size_t index = in_names->elements++;
      if (event == Json::parse_event_t::value && parsed.is_string()) {
        in_names->names.push_back(std::move(parsed.get_ref<std::string&>()));
        return false;  // Taken: the document keeps no copy.
      }
      if (!in_names->first_not_a_string) in_names->first_not_a_string = index;
      return true;
    }
    if (depth == 3 && event == Json::parse_event_t::object_end &&
        EqualsIgnoreAsciiCase(top_key, "Nodes") && EqualsIgnoreAsciiCase(nodes_key, "items")) {
      return ++item_count <= limits.max_nodes;
    }
    return true;
  };
  Json json = Json::parse(body.begin(), body.end(), count, /*allow_exceptions=*/false);
  if (json.is_discarded()) {
    return absl::InvalidArgumentError("ExtenderArgs: request body is not valid JSON");
  }
  if (!json.is_object()) {
    return absl::InvalidArgumentError(
        StrCat("ExtenderArgs: expected a JSON object, got ", json.type_name()));
  }
  if (name_count > limits.max_nodes || item_count > limits.max_nodes) {
    return absl::InvalidArgumentError(
        StrCat("ExtenderArgs.", name_count > limits.max_nodes ? "NodeNames" : "Nodes.items", ": ",
               std::max(name_count, item_count), " nodes, more than the limit of ",
               limits.max_nodes, " per request"));
  }
  ExtenderArgs args;
  const Json* pod = FindField(json, "Pod");
  if (pod == nullptr || !pod->is_object()) {
    return absl::InvalidArgumentError("ExtenderArgs.Pod: missing or not an object");
  }
  const Json* metadata = FindField(*pod, "metadata");
  if (metadata == nullptr || !metadata->is_object()) {
    return absl::InvalidArgumentError("ExtenderArgs.Pod.metadata: missing or not an object");
  }
  args.pod = *pod;
  if (const Json* names = FindField(json, "NodeNames"); names != nullptr && !names->is_null()) {
    if (!names->is_array()) {
      return absl::InvalidArgumentError(
          StrCat("ExtenderArgs.NodeNames: expected an array, got ", names->type_name()));
    }
    // The spelling FindField chose, and what the parser took out of its array.
    NameList* list = nullptr;
    for (auto it = json.begin(); it != json.end(); ++it) {
      if (&*it == names) list = &name_lists[it.key()];
    }
    if (list == nullptr) return absl::InternalError("ExtenderArgs.NodeNames: lost while parsing");
    if (list->first_not_a_string) {
      return absl::InvalidArgumentError(
          StrCat("ExtenderArgs.NodeNames[", *list->first_not_a_string, "]: expected a string"));
    }
    for (size_t i = 0; i < list->names.size(); ++i) {
      if (list->names[i].size() > limits.max_node_name_bytes) {
        return absl::InvalidArgumentError(
            StrCat("ExtenderArgs.NodeNames[", i, "]: ", list->names[i].size(),
                   " bytes, more than a node name's ", limits.max_node_name_bytes));
      }
    }
    args.node_names = std::move(list->names);
  }
  if (const Json* nodes = FindField(json, "Nodes"); nodes != nullptr && !nodes->is_null()) {
    const Json* items = FindField(*nodes, "items");
    if (!nodes->is_object() || items == nullptr || !(items->is_array() || items->is_null())) {
      return absl::InvalidArgumentError(
          "ExtenderArgs.Nodes: expected a NodeList {\"items\": [...]}");
    }
    std::vector<Json> list;
    std::vector<std::string> names;
    if (items->is_array()) {
      for (size_t i = 0; i < items->size(); ++i) {
        const Json& node = (*items)[i];
        std::string name;
        if (const Json* md = FindField(node, "metadata"); md != nullptr) {
          if (const Json* n = FindField(*md, "name"); n != nullptr && n->is_string()) {
            name = n->get<std::string>();
          }
        }
        if (name.empty()) {
          return absl::InvalidArgumentError(
              StrCat("ExtenderArgs.Nodes.items[", i, "]: missing metadata.name"));
        }
        names.push_back(std::move(name));
        list.push_back(node);
      }
    }
    if (args.node_names.empty()) args.node_names = std::move(names);
    args.nodes = std::move(list);
  }
  return args;
}

void AppendJsonString(std::string* out, std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  out->push_back('"');
  for (char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        out->append("\\\"");
        break;
      case '\\':
        out->append("\\\\");
        break;
      case '\n':
        out->append("\\n");
        break;
      case '\t':
        out->append("\\t");
        break;
      case '\r':
        out->append("\\r");
        break;
      default:
        if (c < 0x20) {
          out->append("\\u00");
          out->push_back(kHex[c >> 4]);
          out->push_back(kHex[c & 15]);
        } else {
          out->push_back(ch);
        }
    }
  }
  out->push_back('"');
}

namespace {

void AppendReasons(std::string* out, const std::vector<std::pair<std::string, std::string>>& m) {
  out->push_back('{');
  bool first = true;
  for (const auto& [node, reason] : m) {
    if (!first) out->push_back(',');
    first = false;
    AppendJsonString(out, node);
    out->push_back(':');
    AppendJsonString(out, reason);
  }
  out->push_back('}');
}

}  // namespace

std::string FilterResultToJson(const FilterResult& result) {
  std::string out;
  out.reserve(64 + 24 * result.node_names.size() + 48 * result.failed_unresolvable_nodes.size());
  out.append("{\"Nodes\":");
  if (result.nodes.has_value()) {
    Json items = Json::array();
    for (const Json& n : *result.nodes) items.push_back(n);
    out.append(Json{{"items", std::move(items)}}.dump());
    out.append(",\"NodeNames\":null");
  } else {
    // Explicitly [] when nothing fits (null would mean "not node-cache capable").
    out.append("null,\"NodeNames\":[");
    for (size_t i = 0; i < result.node_names.size(); ++i) {
      if (i > 0) out.push_back(',');
      AppendJsonString(&out, result.node_names[i]);
    }
    out.push_back(']');
  }
  out.append(",\"FailedNodes\":");
  AppendReasons(&out, result.failed_nodes);
  out.append(",\"FailedAndUnresolvableNodes\":");
  AppendReasons(&out, result.failed_unresolvable_nodes);
  out.append(",\"Error\":");
  AppendJsonString(&out, result.error);
  out.push_back('}');
  return out;
}

Json HostPriorityListToJson(const std::vector<HostPriority>& list) {
  Json out = Json::array();
  for (const HostPriority& h : list) out.push_back(Json{{"Host", h.host}, {"Score", h.score}});
  return out;
}

absl::StatusOr<BindingArgs> ParseBindingArgs(std::string_view body) {
  ASSIGN_OR_RETURN(Json json, ParseObject(body, "ExtenderBindingArgs"));
  BindingArgs args;
  ASSIGN_OR_RETURN(args.pod_name, OptionalString(json, "PodName", "ExtenderBindingArgs"));
  ASSIGN_OR_RETURN(args.pod_namespace, OptionalString(json, "PodNamespace", "ExtenderBindingArgs"));
  ASSIGN_OR_RETURN(args.pod_uid, OptionalString(json, "PodUID", "ExtenderBindingArgs"));
  ASSIGN_OR_RETURN(args.node, OptionalString(json, "Node", "ExtenderBindingArgs"));
  if (args.pod_name.empty()) {
    return absl::InvalidArgumentError("ExtenderBindingArgs.PodName: missing");
  }
  if (args.pod_namespace.empty()) {
    return absl::InvalidArgumentError("ExtenderBindingArgs.PodNamespace: missing");
  }
  if (args.node.empty()) return absl::InvalidArgumentError("ExtenderBindingArgs.Node: missing");
  return args;
}

Json BindingResultToJson(std::string_view error) { return Json{{"Error", std::string(error)}}; }

absl::StatusOr<std::optional<sched::NodeSpec>> NodeSpecFromJson(const Json& node) {
  const Json* metadata = node.is_object() ? FindField(node, "metadata") : nullptr;
  if (metadata == nullptr || !metadata->is_object()) {
    return absl::InvalidArgumentError("node: metadata missing or not an object");
  }
  sched::NodeSpec spec;
  if (auto n = metadata->find("name"); n != metadata->end() && n->is_string()) {
    spec.name = n->get<std::string>();
  }
  if (spec.name.empty()) return absl::InvalidArgumentError("node: metadata.name missing");
  std::string inventory_text;
  if (auto a = metadata->find("annotations"); a != metadata->end() && a->is_object()) {
    auto inv = a->find(deviceplugin::kInventoryAnnotation);
    if (inv == a->end()) return std::optional<sched::NodeSpec>();
    if (!inv->is_string()) {
      return absl::InvalidArgumentError(StrCat("node ", spec.name, ": annotation ",
                                               deviceplugin::kInventoryAnnotation,
                                               " is not a string"));
    }
    inventory_text = inv->get<std::string>();
  } else {
    return std::optional<sched::NodeSpec>();
  }
  absl::StatusOr<deviceplugin::NodeInventory> inventory =
      deviceplugin::DecodeInventory(inventory_text);
  if (!inventory.ok()) {
    return absl::InvalidArgumentError(StrCat("node ", spec.name, ": annotation ",
                                             deviceplugin::kInventoryAnnotation, ": ",
                                             inventory.status().message()));
  }
  spec.gpus = deviceplugin::ToGpuSpecs(*inventory);
  // CPU and memory: kube-scheduler checks them with every pod in view; the engine sees only GPU
  // pods, so its check is a weaker duplicate. Without allocatable (a bare test node) there is no
  // limit from our side.
  spec.cpu_milli = int64_t{1} << 40;
  spec.memory_bytes = int64_t{1} << 60;
  if (const Json* status = FindField(node, "status"); status != nullptr && status->is_object()) {
    if (auto alloc = status->find("allocatable"); alloc != status->end() && alloc->is_object()) {
      if (auto cpu = alloc->find("cpu"); cpu != alloc->end() && cpu->is_string()) {
        absl::StatusOr<int64_t> v = config::ParseQuantityMilli(cpu->get<std::string>());
        if (!v.ok()) {
          return absl::InvalidArgumentError(
              StrCat("node ", spec.name, ": status.allocatable.cpu: ", v.status().message()));
        }
        spec.cpu_milli = *v;
      }
      if (auto mem = alloc->find("memory"); mem != alloc->end() && mem->is_string()) {
        absl::StatusOr<int64_t> v = config::ParseQuantity(mem->get<std::string>());
        if (!v.ok()) {
          return absl::InvalidArgumentError(
              StrCat("node ", spec.name, ": status.allocatable.memory: ", v.status().message()));
        }
        spec.memory_bytes = *v;
      }
    }
  }
  return std::optional<sched::NodeSpec>(std::move(spec));
}

}  // namespace prism::extender
