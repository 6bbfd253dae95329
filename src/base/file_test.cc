#include "base/file.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace prism {
namespace {

using ::testing::HasSubstr;

class ReadFileBoundedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        std::filesystem::temp_directory_path() / ("prism-file-test-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }
  std::filesystem::path dir_;
};

TEST_F(ReadFileBoundedTest, ReadsAFileUpToTheBoundWithItsBytesIntact) {
  const std::string text = std::string("a\0b\r\n", 5) + std::string(200'000, 'x');
  const std::string path = Write("exact", text);
  absl::StatusOr<std::string> read = ReadFileBounded(path, text.size());
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, text);
  absl::StatusOr<std::string> empty = ReadFileBounded(Write("empty", ""), 0);
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(*empty, "");
}

TEST_F(ReadFileBoundedTest, OneByteOverTheBoundIsRefusedNamingThePathAndTheLimit) {
  const std::string path = Write("over", std::string(100'001, 'x'));
  absl::StatusOr<std::string> read = ReadFileBounded(path, 100'000);
  ASSERT_FALSE(read.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(read.status())) << read.status();
  EXPECT_THAT(read.status().message(), HasSubstr(path));
  EXPECT_THAT(read.status().message(), HasSubstr("100000-byte limit"));
}

TEST_F(ReadFileBoundedTest, MissingFilesAndDirectoriesNameThePathAndTheReason) {
  const std::string missing = (dir_ / "missing.yaml").string();
  absl::StatusOr<std::string> read = ReadFileBounded(missing, 1024);
  ASSERT_FALSE(read.ok());
  EXPECT_TRUE(absl::IsNotFound(read.status())) << read.status();
  EXPECT_THAT(read.status().message(), HasSubstr("cannot read " + missing));
  EXPECT_THAT(read.status().message(), HasSubstr("No such file"));

  absl::StatusOr<std::string> dir = ReadFileBounded(dir_.string(), 1024);
  ASSERT_FALSE(dir.ok());
  EXPECT_TRUE(absl::IsNotFound(dir.status())) << dir.status();
  EXPECT_THAT(dir.status().message(), HasSubstr("cannot read " + dir_.string()));
}

TEST_F(ReadFileBoundedTest, AnEndlessDeviceStopsAtTheBound) {
  // /dev/zero never ends: without the bound this read would exhaust memory.
  absl::StatusOr<std::string> read = ReadFileBounded("/dev/zero", 1 << 20);
  ASSERT_FALSE(read.ok());
  EXPECT_THAT(read.status().message(), HasSubstr("/dev/zero: larger than the 1048576-byte limit"));
}

TEST(ReadStreamBoundedTest, NamesTheStreamInItsError) {
  std::istringstream small("abc");
  absl::StatusOr<std::string> read = ReadStreamBounded(small, "standard input", 3);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, "abc");
  std::istringstream big("abcd");
  absl::StatusOr<std::string> over = ReadStreamBounded(big, "standard input", 3);
  ASSERT_FALSE(over.ok());
  EXPECT_THAT(over.status().message(), HasSubstr("standard input: larger than the 3-byte limit"));
}

TEST_F(ReadFileBoundedTest, WriteFileReplacingLeavesTheNewFileAndNoTemporary) {
  const std::string path = Write("record.json", "old");
  ASSERT_TRUE(WriteFileReplacing(path, "new").ok());
  EXPECT_EQ(*ReadFileBounded(path, 16), "new");
  EXPECT_FALSE(std::filesystem::exists(dir_ / ".record.json.tmp"));
  // A directory in the way: the error names the file, and no temporary is left behind.
  std::filesystem::create_directories(dir_ / "taken" / "x");
  const absl::Status failed = WriteFileReplacing((dir_ / "taken").string(), "text");
  ASSERT_FALSE(failed.ok());
  EXPECT_THAT(failed.message(), HasSubstr((dir_ / "taken").string()));
  EXPECT_FALSE(std::filesystem::exists(dir_ / ".taken.tmp"));
}

}  // namespace
}  // namespace prism
