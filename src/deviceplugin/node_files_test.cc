#include "deviceplugin/node_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

#include "deviceplugin/test_util.h"

namespace prism::deviceplugin {
namespace {

namespace fs = std::filesystem;
using testing::Eventually;
using testing::TestDir;

constexpr uint64_t kSize = 332992;  // A region's size (intercept/region.h).

struct stat Lstat(const fs::path& p) {
  struct stat st = {};
  EXPECT_EQ(::lstat(p.c_str(), &st), 0) << p;
  return st;
}

uint64_t Allocated(const fs::path& p) { return static_cast<uint64_t>(Lstat(p).st_blocks) * 512; }

TEST(NodeFilesTest, PlainFileNamesAreOneComponent) {
  for (const char* good : {"a", "uid_main", "x.region", "..a", "a.."}) {
    EXPECT_TRUE(IsPlainFileName(good)) << good;
  }
  for (const char* bad : {"", ".", "..", "a/b", "/a", "a/", "x/l/var/run/cdi"}) {
    EXPECT_FALSE(IsPlainFileName(bad)) << bad;
  }
  EXPECT_FALSE(IsPlainFileName(std::string("a\0b", 3)));
  EXPECT_FALSE(IsPlainFileName(std::string(256, 'a')));
}

TEST(NodeFilesTest, CreateSizedFileMakesAPrivateDirAndAFullSizeFile) {
  const fs::path dir = TestDir() / "vgpu" / "regions";
  ASSERT_TRUE(CreateSizedFile(dir.string(), "u_main", kSize).ok());
  EXPECT_EQ(Lstat(dir).st_mode & 07777, 0700u);
  const struct stat st = Lstat(dir / "u_main");
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0666u);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), kSize);
  // Blocks are reserved up front: the library's stores never meet a full disk.
  EXPECT_GE(Allocated(dir / "u_main"), kSize);

  // A second call (the agent restarted) keeps what the container's processes wrote.
  {
    std::fstream f(dir / "u_main", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f << "live";
  }
  ASSERT_TRUE(CreateSizedFile(dir.string(), "u_main", kSize).ok());
  std::ifstream f(dir / "u_main", std::ios::binary);
  f.seekg(100);
  std::string word(4, '\0');
  f.read(word.data(), 4);
  EXPECT_EQ(word, "live");
}

TEST(NodeFilesTest, CreateSizedFileRefusesLinksAndBadNames) {
  const fs::path base = TestDir();
  const fs::path dir = base / "regions";
  fs::create_directories(dir);
  const fs::path outside = base / "outside";
  std::ofstream(outside) << "host file";
  fs::create_symlink(outside, dir / "u_main");
  absl::Status s = CreateSizedFile(dir.string(), "u_main", kSize);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_EQ(fs::file_size(outside), 9u);  // Never followed, never grown.
  EXPECT_EQ(CreateSizedFile(dir.string(), "../x", kSize).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(fs::exists(base / "x"));
  // A directory of regions that is a link is refused too.
  fs::create_directory_symlink(base / "elsewhere", base / "linked");
  fs::create_directories(base / "elsewhere");
  EXPECT_EQ(CreateSizedFile((base / "linked").string(), "u_main", kSize).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(fs::is_empty(base / "elsewhere"));
}

TEST(NodeFilesTest, TrimFileUndoesEveryWayOfGrowing) {
  const fs::path dir = TestDir() / "regions";
  ASSERT_TRUE(CreateSizedFile(dir.string(), "r", kSize).ok());
  const fs::path file = dir / "r";
  // What a container can do with its writable descriptor.
  const int fd = ::open(file.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::pwrite(fd, "tenant", 6, 0), 6);
  // 1. write(2) past the end: 8 MiB of real blocks.
  const std::string chunk(1 << 20, 'x');
  for (int i = 0; i < 8; ++i) {
    ASSERT_EQ(::pwrite(fd, chunk.data(), chunk.size(), kSize + i * chunk.size()),
              static_cast<ssize_t>(chunk.size()));
  }
  EXPECT_GT(Allocated(file), kSize + (uint64_t{7} << 20));
  absl::StatusOr<bool> t = TrimFile(dir.string(), "r", kSize);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(*t);
  EXPECT_EQ(fs::file_size(file), kSize);
  EXPECT_LE(Allocated(file), kSize + kTrimSlackBytes);
  char head[6];
  ASSERT_EQ(::pread(fd, head, 6, 0), 6);
  EXPECT_EQ(std::string(head, 6), "tenant");  // What is inside the region stays.

  // 2. Blocks allocated past the end without changing the size.
  ASSERT_EQ(::fallocate(fd, FALLOC_FL_KEEP_SIZE, kSize, 16 << 20), 0);
  EXPECT_EQ(fs::file_size(file), kSize);
  EXPECT_GT(Allocated(file), uint64_t{16} << 20);
  t = TrimFile(dir.string(), "r", kSize);
  ASSERT_TRUE(t.ok() && *t);
  EXPECT_LE(Allocated(file), kSize + kTrimSlackBytes);

  // 3. ftruncate(2) larger, and smaller.
  ASSERT_EQ(::ftruncate(fd, int64_t{1} << 40), 0);
  t = TrimFile(dir.string(), "r", kSize);
  ASSERT_TRUE(t.ok() && *t);
  EXPECT_EQ(fs::file_size(file), kSize);
  ASSERT_EQ(::ftruncate(fd, 10), 0);
  t = TrimFile(dir.string(), "r", kSize);
  ASSERT_TRUE(t.ok() && *t);
  EXPECT_EQ(fs::file_size(file), kSize);
  ::close(fd);

  // A file of the right size is left alone.
  t = TrimFile(dir.string(), "r", kSize);
  ASSERT_TRUE(t.ok());
  EXPECT_FALSE(*t);
  EXPECT_EQ(TrimFile(dir.string(), "none", kSize).status().code(), absl::StatusCode::kNotFound);
  ASSERT_EQ(::mkfifo((dir / "fifo").c_str(), 0600), 0);
  EXPECT_EQ(TrimFile(dir.string(), "fifo", kSize).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(NodeFilesTest, RemoveUnderNeverFollowsALinkTheContainerPlanted) {
  const fs::path base = TestDir();
  const fs::path outside = base / "host";  // Stands for /var/run/cdi, /etc, ...
  fs::create_directories(outside / "sub");
  std::ofstream(outside / "keep") << "host";
  std::ofstream(outside / "sub" / "keep") << "host";
  const fs::path dirs = base / "containers";
  // A legacy run directory the container could write: links to the host's directory and file,
  // at the top and deeper, next to its own files.
  fs::create_directories(dirs / "uid_main" / "deep");
  std::ofstream(dirs / "uid_main" / "vgpu.cache") << "region";
  fs::create_directory_symlink(outside, dirs / "uid_main" / "l");
  fs::create_directory_symlink(outside / "sub", dirs / "uid_main" / "deep" / "l2");
  fs::create_symlink(outside / "keep", dirs / "uid_main" / "f");
  ASSERT_EQ(::mkfifo((dirs / "uid_main" / "fifo").c_str(), 0600), 0);

  ASSERT_TRUE(RemoveUnder(dirs.string(), "uid_main").ok());
  EXPECT_FALSE(fs::exists(fs::symlink_status(dirs / "uid_main")));
  EXPECT_TRUE(fs::exists(outside / "keep"));
  EXPECT_TRUE(fs::exists(outside / "sub" / "keep"));

  // The whole entry a link: the link goes, its target stays.
  fs::create_directory_symlink(outside, dirs / "uid_side");
  ASSERT_TRUE(RemoveUnder(dirs.string(), "uid_side").ok());
  EXPECT_FALSE(fs::exists(fs::symlink_status(dirs / "uid_side")));
  EXPECT_TRUE(fs::exists(outside / "sub" / "keep"));

  // A hostile name never reaches the file system.
  for (const char* name : {"x/l/var/run/cdi", "..", ".", "", "../host"}) {
    EXPECT_EQ(RemoveUnder(dirs.string(), name).code(), absl::StatusCode::kInvalidArgument) << name;
  }
  EXPECT_TRUE(fs::exists(outside / "keep"));
  // Nothing there, or no base at all: nothing to do.
  EXPECT_TRUE(RemoveUnder(dirs.string(), "gone").ok());
  EXPECT_TRUE(RemoveUnder((base / "nope").string(), "gone").ok());
  // A base that is a link is not walked.
  fs::create_directory_symlink(outside, base / "linked");
  EXPECT_FALSE(RemoveUnder((base / "linked").string(), "keep").ok());
  EXPECT_TRUE(fs::exists(outside / "keep"));
}

TEST(NodeFilesTest, RemoveUnderStopsAtItsDepthBound) {
  const fs::path base = TestDir();
  fs::path deep = base / "d";
  for (int i = 0; i <= kMaxRemoveDepth + 1; ++i) deep /= "x";
  fs::create_directories(deep);
  EXPECT_EQ(RemoveUnder(base.string(), "d").code(), absl::StatusCode::kFailedPrecondition);
  fs::path shallow = base / "s";  // kMaxRemoveDepth levels of directories, "s" the first.
  for (int i = 1; i < kMaxRemoveDepth; ++i) shallow /= "x";
  fs::create_directories(shallow);
  EXPECT_TRUE(RemoveUnder(base.string(), "s").ok());
  EXPECT_FALSE(fs::exists(base / "s"));
}

TEST(NodeFilesTest, RegionGuardPutsAGrownRegionBackAtOnce) {
  const fs::path dir = TestDir() / "regions";
  std::atomic<int> trims{0};
  RegionGuard guard(dir.string(), kSize, absl::Hours(1),
                    [&](const std::string& name) { trims += name == "u_main" ? 1 : 0; });
  ASSERT_TRUE(guard.Start().ok());
  ASSERT_TRUE(CreateSizedFile(dir.string(), "u_main", kSize).ok());
  const fs::path file = dir / "u_main";
  const int fd = ::open(file.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  const std::string chunk(4 << 20, 'x');
  ASSERT_EQ(::pwrite(fd, chunk.data(), chunk.size(), kSize), static_cast<ssize_t>(chunk.size()));
  // No rescan for an hour: inotify alone brings the guard.
  EXPECT_TRUE(Eventually(
      [&] { return fs::file_size(file) == kSize && Allocated(file) <= kSize + kTrimSlackBytes; }));
  EXPECT_GE(trims.load(), 1);
  ASSERT_EQ(::fallocate(fd, FALLOC_FL_KEEP_SIZE, kSize, 16 << 20), 0);
  EXPECT_TRUE(Eventually([&] { return Allocated(file) <= kSize + kTrimSlackBytes; }));
  ::close(fd);
  guard.Stop();
  guard.Stop();  // Idempotent.
}

TEST(NodeFilesTest, RegionGuardRescansWhatItDidNotSee) {
  const fs::path dir = TestDir() / "regions";
  ASSERT_TRUE(CreateSizedFile(dir.string(), "a", kSize).ok());
  fs::resize_file(dir / "a", 3 * kSize);  // Before any guard ran.
  RegionGuard guard(dir.string(), kSize, absl::Milliseconds(50));
  ASSERT_TRUE(guard.Start().ok());  // Trims what it finds at start.
  EXPECT_EQ(fs::file_size(dir / "a"), kSize);
  EXPECT_EQ(guard.TrimAll(), 0);
  std::ofstream(dir / "b") << std::string(kSize + 10, 'y');
  EXPECT_TRUE(Eventually([&] { return fs::file_size(dir / "b") == kSize; }));
}

}  // namespace
}  // namespace prism::deviceplugin
