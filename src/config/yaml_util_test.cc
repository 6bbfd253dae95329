#include "config/yaml_util.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

// ASan reserves terabytes of address space: no RLIMIT_AS under it.
#if defined(__SANITIZE_ADDRESS__)
#define PRISM_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PRISM_UNDER_ASAN 1
#endif
#endif
#ifndef PRISM_UNDER_ASAN
#define PRISM_UNDER_ASAN 0
#endif

namespace prism::config {
namespace {

using ::testing::HasSubstr;

// Caps the address space at 1 GiB (not under ASan, which reserves terabytes of it).
void CapMemory() {
#if !PRISM_UNDER_ASAN
  rlimit limit{size_t{1} << 30, size_t{1} << 30};
  setrlimit(RLIMIT_AS, &limit);
#endif
}

// Runs `load` in a child process that is killed after two seconds, its memory capped: a loader
// that loops or grows without bound fails the test instead of hanging it.
template <typename Load>
void ExpectTerminates(Load load) {
  ASSERT_EXIT(
      {
        alarm(2);
        CapMemory();
        load();
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

// Issue 13 #2: yaml-cpp 0.7's LoadAll loops forever, growing memory, on a document that starts
// with ','; Load silently returns null for it.
TEST(YamlUtilTest, DocumentsStartingWithACommaAreErrorsNotHangs) {
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  for (const char* text : {",", "---\n,", ", a", "kind: Pod\n---\n,", "a: 1\n---\n, b\n"}) {
    ExpectTerminates([text] { (void)LoadAllYaml(text, "pods.yaml"); });
    if (HasFatalFailure()) return;  // It would hang here too.
    absl::StatusOr<std::vector<YAML::Node>> all = LoadAllYaml(text, "pods.yaml");
    ASSERT_FALSE(all.ok()) << text;
    EXPECT_THAT(all.status().message(), HasSubstr("pods.yaml: not valid YAML: line "));
    EXPECT_THAT(all.status().message(), HasSubstr("unexpected ','"));
  }
  for (const char* text : {",", ", a"}) {
    ExpectTerminates([text] { (void)LoadYaml(text, "cluster.yaml"); });
    if (HasFatalFailure()) return;
    absl::StatusOr<YAML::Node> one = LoadYaml(text, "cluster.yaml");
    EXPECT_FALSE(one.ok()) << text;
  }
}

TEST(YamlUtilTest, WellFormedStreamsStillLoad) {
  absl::StatusOr<std::vector<YAML::Node>> docs =
      LoadAllYaml("a: 1\n---\n# nothing\n---\n- x\n- y\n---\n[1, 2]\n...\n", "f");
  ASSERT_TRUE(docs.ok()) << docs.status();
  ASSERT_EQ(docs->size(), 3u);
  EXPECT_EQ((*docs)[0]["a"].Scalar(), "1");
  EXPECT_EQ((*docs)[1].size(), 2u);
  EXPECT_EQ((*docs)[2].size(), 2u);
  EXPECT_TRUE(LoadAllYaml("", "f").ok());
  EXPECT_TRUE(LoadYaml("k: v", "f").ok());
  EXPECT_FALSE(LoadAllYaml("a: [", "f").ok());
}

}  // namespace
}  // namespace prism::config
