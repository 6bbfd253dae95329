#include "extender/wire.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "base/status_macros.h"
#include "base/strings.h"
#include "config/quantity.h"
#include "deviceplugin/inventory.h"
#include "simdjson.h"

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

namespace {

namespace dom = simdjson::dom;

// nlohmann's names for JSON types, as the error messages have always used them.
std::string_view TypeName(dom::element_type type) {
  switch (type) {
    case dom::element_type::ARRAY:
      return "array";
    case dom::element_type::OBJECT:
      return "object";
    case dom::element_type::STRING:
      return "string";
    case dom::element_type::BOOL:
      return "boolean";
    case dom::element_type::NULL_VALUE:
      return "null";
    default:
      return "number";
  }
}

// The element as an array or object, its type already checked. By value: a range-for over
// `get_array().value_unsafe()` would iterate a reference into a destroyed temporary.
dom::array AsArray(dom::element e) {
  dom::array out;
  if (e.get_array().get(out) != simdjson::SUCCESS) return dom::array();
  return out;
}
dom::object AsObject(dom::element e) {
  dom::object out;
  if (e.get_object().get(out) != simdjson::SUCCESS) return dom::object();
  return out;
}

// The same value as nlohmann would have parsed it: non-negative integers unsigned, a repeated
// key's last value. Recursion is bounded by simdjson's maximum depth (1,024).
Json ToNlohmann(dom::element e) {
  switch (e.type()) {
    case dom::element_type::ARRAY: {
      Json out = Json::array();
      for (dom::element v : AsArray(e)) out.push_back(ToNlohmann(v));
      return out;
    }
    case dom::element_type::OBJECT: {
      Json out = Json::object();
      for (dom::key_value_pair field : AsObject(e)) {
        out[std::string(field.key)] = ToNlohmann(field.value);
      }
      return out;
    }
    case dom::element_type::INT64: {
      const int64_t v = e.get_int64().value_unsafe();
      return v >= 0 ? Json(static_cast<uint64_t>(v)) : Json(v);
    }
    case dom::element_type::UINT64:
      return Json(e.get_uint64().value_unsafe());
    case dom::element_type::DOUBLE:
      return Json(e.get_double().value_unsafe());
    case dom::element_type::STRING:
      return Json(std::string(e.get_string().value_unsafe()));
    case dom::element_type::BOOL:
      return Json(e.get_bool().value_unsafe());
    case dom::element_type::NULL_VALUE:
      return Json(nullptr);
  }
  return Json();
}

// FindField's rule on a simdjson object: the exact key (its last occurrence), else the
// case-insensitive match that sorts first (std::map order, as nlohmann keeps keys), its last
// occurrence.
std::optional<dom::element> FindDomField(dom::object object, std::string_view key) {
  std::optional<dom::element> exact;
  std::optional<dom::element> folded;
  std::string_view folded_key;
  for (dom::key_value_pair field : object) {
    if (field.key == key) {
      exact = field.value;
    } else if (EqualsIgnoreAsciiCase(field.key, key) && (!folded || field.key <= folded_key)) {
      folded = field.value;
      folded_key = field.key;
    }
  }
  return exact ? exact : folded;
}

// One parser per server thread, kept for bodies up to 256 KiB (20,000 names of 12 bytes) so its
// buffers are reused (a fresh parser's allocations and page faults were a visible part of a
// call); a larger body gets its own parser, so a thread keeps at most about 1 MiB (simdjson's
// buffers are a few times the body) however large the bodies it saw.
constexpr size_t kReusedParserBytes = size_t{256} << 10;

absl::StatusOr<ExtenderArgs> ParseExtenderArgsWith(dom::parser& parser, std::string_view body,
                                                   const ExtenderLimits& limits) {
  // Empty is not JSON; said here, since simdjson would memcpy from a null pointer.
  if (body.empty()) {
    return absl::InvalidArgumentError("ExtenderArgs: request body is not valid JSON (empty)");
  }
  dom::element root;
  if (simdjson::error_code error = parser.parse(body.data(), body.size()).get(root)) {
    return absl::InvalidArgumentError(StrCat("ExtenderArgs: request body is not valid JSON (",
                                             simdjson::error_message(error), ")"));
  }
  dom::object top;
  if (root.get_object().get(top) != simdjson::SUCCESS) {
    return absl::InvalidArgumentError(
        StrCat("ExtenderArgs: expected a JSON object, got ", TypeName(root.type())));
  }
  const std::optional<dom::element> names = FindDomField(top, "NodeNames");
  const std::optional<dom::element> nodes = FindDomField(top, "Nodes");
  std::optional<dom::element> items;
  if (nodes && !nodes->is_null()) {
    dom::object node_list;
    if (nodes->get_object().get(node_list) == simdjson::SUCCESS) {
      items = FindDomField(node_list, "items");
    }
    if (!items || !(items->is_array() || items->is_null())) {
      return absl::InvalidArgumentError(
          "ExtenderArgs.Nodes: expected a NodeList {\"items\": [...]}");
    }
  }
  // The bound first: an oversized list is refused before any of it is copied.
  const size_t name_count = names && names->is_array() ? AsArray(*names).size() : 0;
  const size_t item_count = items && items->is_array() ? AsArray(*items).size() : 0;
  if (name_count > limits.max_nodes || item_count > limits.max_nodes) {
    return absl::InvalidArgumentError(
        StrCat("ExtenderArgs.", name_count > limits.max_nodes ? "NodeNames" : "Nodes.items", ": ",
               std::max(name_count, item_count), " nodes, more than the limit of ",
               limits.max_nodes, " per request"));
  }
  const std::optional<dom::element> pod = FindDomField(top, "Pod");
  if (!pod || !pod->is_object()) {
    return absl::InvalidArgumentError("ExtenderArgs.Pod: missing or not an object");
  }
  const std::optional<dom::element> metadata = FindDomField(AsObject(*pod), "metadata");
  if (!metadata || !metadata->is_object()) {
    return absl::InvalidArgumentError("ExtenderArgs.Pod.metadata: missing or not an object");
  }
  // The names, checked, then copied into one buffer.
  std::vector<std::string_view> parsed;  // Views of the parser's strings until copied.
  if (names && !names->is_null()) {
    if (!names->is_array()) {
      return absl::InvalidArgumentError(
          StrCat("ExtenderArgs.NodeNames: expected an array, got ", TypeName(names->type())));
    }
    parsed.reserve(name_count);
    for (dom::element e : AsArray(*names)) {
      std::string_view name;
      if (e.get_string().get(name) != simdjson::SUCCESS) {
        return absl::InvalidArgumentError(
            StrCat("ExtenderArgs.NodeNames[", parsed.size(), "]: expected a string"));
      }
      if (name.size() > limits.max_node_name_bytes) {
        return absl::InvalidArgumentError(
            StrCat("ExtenderArgs.NodeNames[", parsed.size(), "]: ", name.size(),
                   " bytes, more than a node name's ", limits.max_node_name_bytes));
      }
      parsed.push_back(name);
    }
  }
  ExtenderArgs args;
  args.pod = ToNlohmann(*pod);
  if (items) {
    std::vector<Json> list;
    std::vector<std::string_view> item_names;
    if (items->is_array()) {
      for (dom::element node : AsArray(*items)) {
        std::string_view name;
        std::optional<dom::element> md;
        if (node.is_object()) md = FindDomField(AsObject(node), "metadata");
        if (md && md->is_object()) {
          if (std::optional<dom::element> n = FindDomField(AsObject(*md), "name");
              n && n->is_string()) {
            name = n->get_string().value_unsafe();
          }
        }
        if (name.empty()) {
          return absl::InvalidArgumentError(
              StrCat("ExtenderArgs.Nodes.items[", list.size(), "]: missing metadata.name"));
        }
        item_names.push_back(name);
        list.push_back(ToNlohmann(node));
      }
    }
    if (parsed.empty()) parsed = std::move(item_names);
    args.nodes = std::move(list);
  }
  size_t bytes = 0;
  for (std::string_view name : parsed) bytes += name.size();
  args.name_bytes = std::make_unique<char[]>(std::max<size_t>(bytes, 1));
  args.node_names.reserve(parsed.size());
  char* at = args.name_bytes.get();
  for (std::string_view name : parsed) {
    std::copy(name.begin(), name.end(), at);
    args.node_names.emplace_back(at, name.size());
    at += name.size();
  }
  return args;
}

}  // namespace

absl::StatusOr<ExtenderArgs> ParseExtenderArgs(std::string_view body,
                                               const ExtenderLimits& limits) {
  if (body.size() > kReusedParserBytes) {
    dom::parser parser;
    return ParseExtenderArgsWith(parser, body, limits);
  }
  thread_local dom::parser parser;
  return ParseExtenderArgsWith(parser, body, limits);
}

void AppendJsonString(std::string* out, std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  out->push_back('"');
  // Runs of characters that need no escape (all of a node name) are appended at once.
  size_t run = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c != '"' && c != '\\') continue;
    out->append(text.data() + run, i - run);
    run = i + 1;
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
        out->append("\\u00");
        out->push_back(kHex[c >> 4]);
        out->push_back(kHex[c & 15]);
    }
  }
  out->append(text.data() + run, text.size() - run);
  out->push_back('"');
}

namespace {

void AppendReasons(std::string* out, const FilterResult::NodeReasons& m) {
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

std::string HostPriorityListToJson(const std::vector<HostPriority>& list) {
  std::string out;
  out.reserve(2 + 40 * list.size());
  out.push_back('[');
  for (size_t i = 0; i < list.size(); ++i) {
    out.append(i == 0 ? "{\"Host\":" : ",{\"Host\":");
    AppendJsonString(&out, list[i].host);
    StrAppend(&out, ",\"Score\":", list[i].score, "}");
  }
  out.push_back(']');
  return out;
}

namespace {

// The victims of one node: {"Pods": [...], "NumPDBViolations": n}. `meta`: Pods are MetaPods
// ({"UID"}), else full pods (metadata.uid).
absl::Status ParseNodeVictims(dom::element value, bool meta, const std::string& where,
                              const PreemptionArgsLimits& limits, size_t* total,
                              NodeVictims* out) {
  if (!value.is_object()) {
    return absl::InvalidArgumentError(
        StrCat(where, ": expected an object, got ", TypeName(value.type())));
  }
  const dom::object victims = AsObject(value);
  if (std::optional<dom::element> n = FindDomField(victims, "NumPDBViolations");
      n && !n->is_null()) {
    int64_t count = 0;
    if (n->get_int64().get(count) != simdjson::SUCCESS || count < 0) {
      return absl::InvalidArgumentError(
          StrCat(where, ".NumPDBViolations: expected a non-negative integer"));
    }
    out->pdb_violations = count;
  }
  const std::optional<dom::element> pods = FindDomField(victims, "Pods");
  if (!pods || pods->is_null()) return absl::OkStatus();
  if (!pods->is_array()) {
    return absl::InvalidArgumentError(
        StrCat(where, ".Pods: expected an array, got ", TypeName(pods->type())));
  }
  const dom::array list = AsArray(*pods);
  if (list.size() > limits.max_victims_per_node || *total + list.size() > limits.max_victims) {
    return absl::InvalidArgumentError(
        StrCat(where, ".Pods: ", list.size(), " victims, more than the limit of ",
               std::min(limits.max_victims_per_node, limits.max_victims - *total), " left"));
  }
  *total += list.size();
  for (dom::element pod : list) {
    const std::string at = StrCat(where, ".Pods[", out->uids.size(), "]");
    std::optional<dom::element> holder;
    if (pod.is_object()) holder = meta ? pod : FindDomField(AsObject(pod), "metadata");
    std::optional<dom::element> uid;
    if (holder && holder->is_object()) uid = FindDomField(AsObject(*holder), meta ? "UID" : "uid");
    std::string_view text;
    if (!uid || uid->get_string().get(text) != simdjson::SUCCESS || text.empty()) {
      return absl::InvalidArgumentError(
          StrCat(at, meta ? ".UID" : ".metadata.uid", ": missing or not a string"));
    }
    if (text.size() > limits.max_uid_bytes) {
      return absl::InvalidArgumentError(StrCat(at, ": UID of ", text.size(),
                                               " bytes, more than ", limits.max_uid_bytes));
    }
    if (std::find(out->uids.begin(), out->uids.end(), text) != out->uids.end()) {
      return absl::InvalidArgumentError(StrCat(at, ": pod ", QuoteBounded(text), " listed twice"));
    }
    out->uids.emplace_back(text);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<PreemptionArgs> ParsePreemptionArgs(std::string_view body,
                                                   const PreemptionArgsLimits& limits) {
  constexpr std::string_view kWhat = "ExtenderPreemptionArgs";
  if (body.empty()) {
    return absl::InvalidArgumentError(StrCat(kWhat, ": request body is not valid JSON (empty)"));
  }
  dom::parser parser;  // Preemption is rare: no parser kept per thread.
  dom::element root;
  if (simdjson::error_code error = parser.parse(body.data(), body.size()).get(root)) {
    return absl::InvalidArgumentError(StrCat(kWhat, ": request body is not valid JSON (",
                                             simdjson::error_message(error), ")"));
  }
  if (!root.is_object()) {
    return absl::InvalidArgumentError(
        StrCat(kWhat, ": expected a JSON object, got ", TypeName(root.type())));
  }
  const dom::object top = AsObject(root);
  const std::optional<dom::element> pod = FindDomField(top, "Pod");
  if (!pod || !pod->is_object()) {
    return absl::InvalidArgumentError(StrCat(kWhat, ".Pod: missing or not an object"));
  }
  const std::optional<dom::element> metadata = FindDomField(AsObject(*pod), "metadata");
  if (!metadata || !metadata->is_object()) {
    return absl::InvalidArgumentError(StrCat(kWhat, ".Pod.metadata: missing or not an object"));
  }
  // nodeCacheCapable sends MetaVictims only; otherwise full pods. Meta wins when both come.
  bool meta = true;
  std::optional<dom::element> map = FindDomField(top, "NodeNameToMetaVictims");
  if (!map || map->is_null()) {
    meta = false;
    map = FindDomField(top, "NodeNameToVictims");
  }
  const std::string field = StrCat(kWhat, meta ? ".NodeNameToMetaVictims" : ".NodeNameToVictims");
  PreemptionArgs args;
  if (map && !map->is_null()) {
    if (!map->is_object()) {
      return absl::InvalidArgumentError(
          StrCat(field, ": expected an object, got ", TypeName(map->type())));
    }
    const dom::object nodes = AsObject(*map);
    if (nodes.size() > limits.max_nodes) {
      return absl::InvalidArgumentError(StrCat(field, ": ", nodes.size(),
                                               " nodes, more than the limit of ",
                                               limits.max_nodes, " per request"));
    }
    std::set<std::string_view> seen;
    size_t total = 0;
    for (dom::key_value_pair entry : nodes) {
      const std::string_view name = entry.key;
      if (name.empty() || name.size() > limits.max_node_name_bytes) {
        return absl::InvalidArgumentError(
            StrCat(field, ": node name of ", name.size(), " bytes (1 to ",
                   limits.max_node_name_bytes, ")"));
      }
      if (!seen.insert(name).second) {
        return absl::InvalidArgumentError(
            StrCat(field, ": node ", QuoteBounded(name), " listed twice"));
      }
      NodeVictims victims;
      victims.node = std::string(name);
      RETURN_IF_ERROR(ParseNodeVictims(entry.value, meta,
                                       StrCat(field, "[", QuoteBounded(name), "]"), limits,
                                       &total, &victims));
      args.nodes.push_back(std::move(victims));
    }
  }
  args.pod = ToNlohmann(*pod);
  return args;
}

std::string PreemptionResultToJson(const std::vector<NodeVictims>& nodes) {
  std::string out = "{\"NodeNameToMetaVictims\":{";
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (i > 0) out.push_back(',');
    AppendJsonString(&out, nodes[i].node);
    out.append(":{\"Pods\":[");
    for (size_t j = 0; j < nodes[i].uids.size(); ++j) {
      out.append(j == 0 ? "{\"UID\":" : ",{\"UID\":");
      AppendJsonString(&out, nodes[i].uids[j]);
      out.push_back('}');
    }
    StrAppend(&out, "],\"NumPDBViolations\":", nodes[i].pdb_violations, "}");
  }
  out.append("}}");
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
  spec.topology = inventory->topology;  // Positions = the inventory's GPU order, as spec.gpus.
  spec.simulated = inventory->simulated;
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
