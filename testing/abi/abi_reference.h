// testing/abi/abi_reference.h: helpers for the tests that check the project's hand-written CUDA
// and NVML declarations against NVIDIA's facts in testing/abi/*.json (PROVENANCE.md says where
// those come from). Header-only; used by src/intercept/abi_reference_test.cc and
// src/nvml/abi_reference_test.cc.
//
// The comparison is at ABI level, the way the tables spell types (`params_canonical`): typedefs
// expanded, enums as `int`, `unsigned int` as `uint`, every 64-bit unsigned integer as `u64`, a
// pointer to a struct as `struct <tag>*`. A struct that the project declares with a layout is
// spelled with NVIDIA's tag for the same typedef name (a tag is not part of the ABI; the layout,
// checked field by field, is).
#pragma once

#include <stddef.h>

#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace prism::abi_reference {

using Json = nlohmann::json;

// Reads testing/abi/<file> (PRISM_ABI_FACTS_DIR is set by CMake). Returns an empty object if the
// file is missing or malformed; the tests then fail on their first lookup, naming the file.
inline Json LoadFacts(const std::string& file) {
  std::ifstream in(std::string(PRISM_ABI_FACTS_DIR) + "/" + file);
  if (!in) return Json::object();
  Json facts = Json::parse(in, nullptr, /*allow_exceptions=*/false);
  return facts.is_discarded() ? Json::object() : facts;
}

// Reads a source file of the project (for the lists of names a header declares).
inline std::string ReadSource(const std::string& relative) {
  std::ifstream in(std::string(PRISM_ABI_SOURCE_DIR) + "/" + relative);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// ---- Canonical spelling of a C type ------------------------------------------------------------
// Canon<T>::Str(facts) spells T the way the tables' *_canonical fields do. A type without a
// specialization does not compile: the test must say how a new type is spelled.
template <class T>
struct Canon;

template <>
struct Canon<void> {
  static std::string Str(const Json&) { return "void"; }
};
template <>
struct Canon<char> {
  static std::string Str(const Json&) { return "char"; }
};
template <>
struct Canon<int> {
  static std::string Str(const Json&) { return "int"; }
};
template <>
struct Canon<unsigned int> {
  static std::string Str(const Json&) { return "uint"; }
};
template <>
struct Canon<unsigned long> {  // size_t, uint64_t on LP64.
  static_assert(sizeof(unsigned long) == 8, "LP64 only, as the tables");
  static std::string Str(const Json&) { return "u64"; }
};
template <>
struct Canon<unsigned long long> {
  static std::string Str(const Json&) { return "u64"; }
};
template <class T>
struct Canon<T*> {
  static std::string Str(const Json& facts) { return Canon<T>::Str(facts) + "*"; }
};
template <class T>
struct Canon<const T> {
  static std::string Str(const Json& facts) { return "const " + Canon<T>::Str(facts); }
};

// An opaque handle's struct (only ever behind a pointer): spelled by its own tag.
#define PRISM_ABI_HANDLE_TAG(tag)                                           \
  template <>                                                               \
  struct prism::abi_reference::Canon<tag> {                                 \
    static std::string Str(const prism::abi_reference::Json&) { return "struct " #tag; } \
  };

// A struct the project lays out, named by its typedef: spelled with NVIDIA's tag for that
// typedef (facts["structs"][typedef]["tag"]); a typedef the table lacks spells "struct ?<name>",
// which matches nothing.
#define PRISM_ABI_STRUCT_TYPEDEF(name)                                      \
  template <>                                                               \
  struct prism::abi_reference::Canon<name> {                                \
    static std::string Str(const prism::abi_reference::Json& facts) {       \
      const auto& structs = facts["structs"];                               \
      if (structs.contains(#name) && structs[#name].contains("tag")) {      \
        return "struct " + structs[#name]["tag"].get<std::string>();        \
      }                                                                     \
      return "struct ?" #name;                                              \
    }                                                                       \
  };

// A function type's return and parameter spellings.
template <class F>
struct Signature;
template <class R, class... Args>
struct Signature<R(Args...)> {
  static std::string Returns(const Json& facts) { return Canon<R>::Str(facts); }
  static std::vector<std::string> Params(const Json& facts) {
    return {Canon<Args>::Str(facts)...};
  }
};

// ---- What the project declares -----------------------------------------------------------------
struct Field {
  long long offset;
  long long size;
};
struct Layout {
  long long size;
  long long align;
  std::map<std::string, Field> fields;  // By the tables' field path ("allocFlags.usage").
};
struct Function {
  std::string returns;
  std::vector<std::string> params;
};

// PRISM_ABI_FIELD(layouts, Struct, path): records offsetof and sizeof of Struct::path (a nested
// path like allocFlags.usage works: GCC and clang accept it in offsetof).
#define PRISM_ABI_LAYOUT(layouts, type) \
  (layouts)[#type] = prism::abi_reference::Layout{sizeof(type), alignof(type), {}}
#define PRISM_ABI_FIELD(layouts, type, path)                                                  \
  (layouts)[#type].fields[#path] = prism::abi_reference::Field{                               \
      static_cast<long long>(offsetof(type, path)),                                           \
      static_cast<long long>(sizeof(static_cast<type*>(nullptr)->path))}

// Names a header declares, found in its text: enumerators (`NAME = value,` inside an enum) and
// object-like macros (`#define NAME value`). The test requires each to be checked or listed as
// unverified, so a constant added to a header without a fact to check it against fails.
inline std::set<std::string> DeclaredConstantNames(const std::string& text) {
  std::set<std::string> names;
  std::istringstream lines(text);
  bool in_enum = false;
  for (std::string line; std::getline(lines, line);) {
    const size_t first = line.find_first_not_of(" \t");
    if (first == std::string::npos) continue;
    const std::string body = line.substr(first);
    if (body.rfind("enum", 0) == 0 && body.find('{') != std::string::npos) {
      in_enum = true;
      continue;
    }
    if (in_enum) {
      if (body[0] == '}') {
        in_enum = false;
        continue;
      }
      if (body.rfind("//", 0) == 0) continue;
      const size_t end = body.find_first_of(" =,");
      names.insert(body.substr(0, end));
      continue;
    }
    if (body.rfind("#define ", 0) == 0) {
      const std::string rest = body.substr(8);
      const size_t end = rest.find_first_of(" (\t");
      if (end == std::string::npos || rest[end] == '(') continue;  // Guard or function-like.
      names.insert(rest.substr(0, end));
    }
  }
  return names;
}

// "cuMemAllocAsync (with CUDA_API_PER_THREAD_DEFAULT_STREAM)" -> "cuMemAllocAsync".
inline std::string MacroBase(const Json& function) {
  if (!function.contains("macro_of") || !function["macro_of"].is_string()) return "";
  const std::string text = function["macro_of"].get<std::string>();
  return text.substr(0, text.find(' '));
}

inline std::string Join(const std::vector<std::string>& parts) {
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : ", ") + p;
  return out;
}

// ---- Checks (GoogleTest assertions) ------------------------------------------------------------
struct TypeFacts {
  long long size;
  long long align;
  std::string canonical;
};
#define PRISM_ABI_TYPE(types, facts, type)                                                  \
  (types)[#type] = prism::abi_reference::TypeFacts{                                         \
      sizeof(type), alignof(type), prism::abi_reference::Canon<type>::Str(facts)}

// Every constant the project declares equals NVIDIA's value; a name NVIDIA's table lacks must be
// listed in `unverified`, and a listed name must really be missing (a stale list fails).
inline void ExpectConstantsMatch(const Json& facts, const std::map<std::string, long long>& ours,
                                 const std::set<std::string>& unverified) {
  ASSERT_TRUE(facts.contains("constants")) << "fact table missing or malformed";
  const Json& theirs = facts["constants"];
  for (const auto& [name, value] : ours) {
    if (!theirs.contains(name)) {
      EXPECT_EQ(unverified.count(name), 1u)
          << name << " is declared but NVIDIA's table has no such constant";
      continue;
    }
    EXPECT_EQ(unverified.count(name), 0u) << name << " is listed as unverified but has a fact";
    EXPECT_EQ(value, theirs[name].get<long long>()) << name;
  }
  for (const std::string& name : unverified) {
    EXPECT_EQ(ours.count(name), 1u) << name << " is listed as unverified but not declared";
  }
}

// Every name a header declares (DeclaredConstantNames) is checked: its value is in `ours` under
// the same name or under the NVIDIA name `aliases` maps it to.
inline void ExpectEveryDeclaredConstantChecked(const std::set<std::string>& declared,
                                               const std::map<std::string, long long>& ours,
                                               const std::map<std::string, std::string>& aliases) {
  for (const std::string& name : declared) {
    const auto alias = aliases.find(name);
    const std::string checked = alias == aliases.end() ? name : alias->second;
    EXPECT_EQ(ours.count(checked), 1u) << name << " is declared but not compared with NVIDIA's";
  }
}

// Sizes, alignments and field offsets of every struct the project lays out; every field NVIDIA
// lists must be compared (a field missing from `ours` fails), and `ours` lists no field NVIDIA
// lacks. `opaque`: structs the table has that the project only declares, never lays out.
inline void ExpectLayoutsMatch(const Json& facts, const std::map<std::string, Layout>& ours,
                               const std::set<std::string>& opaque) {
  ASSERT_TRUE(facts.contains("structs")) << "fact table missing or malformed";
  const Json& theirs = facts["structs"];
  for (const auto& [name, layout] : ours) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(theirs.contains(name)) << "NVIDIA's table has no struct " << name;
    const Json& t = theirs[name];
    EXPECT_EQ(layout.size, t["size"].get<long long>()) << "sizeof";
    EXPECT_EQ(layout.align, t["align"].get<long long>()) << "alignof";
    for (const auto& [path, field] : t["fields"].items()) {
      const auto it = layout.fields.find(path);
      if (it == layout.fields.end()) {
        ADD_FAILURE() << "field " << path << " is not compared";
        continue;
      }
      EXPECT_EQ(it->second.offset, field["offset"].get<long long>()) << "offsetof " << path;
      EXPECT_EQ(it->second.size, field["size"].get<long long>()) << "sizeof " << path;
    }
    for (const auto& [path, field] : layout.fields) {
      EXPECT_TRUE(t["fields"].contains(path)) << "NVIDIA's " << name << " has no field " << path;
    }
  }
  for (const auto& [name, t] : theirs.items()) {
    EXPECT_TRUE(ours.count(name) == 1 || opaque.count(name) == 1)
        << "struct " << name << " in NVIDIA's table is not compared";
  }
}

// Scalar and handle typedefs: size, alignment and what they expand to. `undeclared`: typedefs in
// the table the project does not declare (it uses the underlying type).
inline void ExpectTypesMatch(const Json& facts, const std::map<std::string, TypeFacts>& ours,
                             const std::set<std::string>& undeclared) {
  ASSERT_TRUE(facts.contains("types")) << "fact table missing or malformed";
  const Json& theirs = facts["types"];
  for (const auto& [name, type] : ours) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(theirs.contains(name)) << "NVIDIA's table has no type " << name;
    EXPECT_EQ(type.size, theirs[name]["size"].get<long long>()) << "sizeof";
    EXPECT_EQ(type.align, theirs[name]["align"].get<long long>()) << "alignof";
    EXPECT_EQ(type.canonical, theirs[name]["canonical"].get<std::string>());
  }
  for (const auto& [name, t] : theirs.items()) {
    EXPECT_TRUE(ours.count(name) == 1 || undeclared.count(name) == 1)
        << "type " << name << " in NVIDIA's table is not compared";
  }
}

// One function's prototype: return and parameter types as NVIDIA spells them (canonical).
inline void ExpectPrototypeMatches(const Json& facts, const std::string& name,
                                   const Function& ours) {
  SCOPED_TRACE(name);
  ASSERT_TRUE(facts["functions"].contains(name)) << "NVIDIA's table has no function " << name;
  const Json& t = facts["functions"][name];
  EXPECT_EQ(ours.returns, t["returns_canonical"].get<std::string>()) << "return type";
  EXPECT_EQ(Join(ours.params), Join(t["params_canonical"].get<std::vector<std::string>>()))
      << "parameters";
}

}  // namespace prism::abi_reference
