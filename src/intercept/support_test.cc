// Unit tests of the interception library's small parts: the allocation table, the environment
// contract, liveness and UUID spelling.
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <random>
#include <unordered_map>

#include "gtest/gtest.h"

#include "intercept/alloc_table.h"
#include "intercept/config.h"
#include "intercept/liveness.h"
#include "intercept/uuid.h"

namespace prism::vgpu {
namespace {

TEST(AllocTableTest, InsertFindRemove) {
  AllocTable table;
  AllocRecord r;
  r.key = 0x7f0000200000;
  r.bytes = 4096;
  r.device = 1;
  r.kind = AllocKind::kLinear;
  ASSERT_TRUE(table.Insert(r));
  ASSERT_NE(table.Find(r.key, AllocKind::kLinear), nullptr);
  EXPECT_EQ(table.Find(r.key, AllocKind::kLinear)->bytes, 4096u);
  EXPECT_EQ(table.Find(r.key, AllocKind::kArray), nullptr);  // Kinds are separate namespaces.
  AllocRecord out;
  EXPECT_TRUE(table.Remove(r.key, AllocKind::kLinear, &out));
  EXPECT_EQ(out.device, 1);
  EXPECT_FALSE(table.Remove(r.key, AllocKind::kLinear, &out));
  EXPECT_EQ(table.size(), 0u);
}

// Random operations against std::unordered_map: growth and backward-shift deletion keep every
// entry reachable.
TEST(AllocTableTest, MatchesAReferenceMapUnderRandomOperations) {
  AllocTable table;
  std::unordered_map<uint64_t, uint64_t> reference;
  std::mt19937_64 rng(42);
  for (int i = 0; i < 200000; ++i) {
    // Keys clustered like device pointers (2 MiB aligned, few distinct high bits).
    const uint64_t key = 0x7f0000000000ULL + (rng() % 5000) * (2 << 20);
    if (rng() % 3 == 0) {
      AllocRecord out;
      const bool found = table.Remove(key, AllocKind::kPool, &out);
      ASSERT_EQ(found, reference.count(key) == 1) << "seed 42, step " << i;
      if (found) {
        EXPECT_EQ(out.bytes, reference[key]);
        reference.erase(key);
      }
    } else {
      AllocRecord r;
      r.key = key;
      r.bytes = rng();
      r.kind = AllocKind::kPool;
      ASSERT_TRUE(table.Insert(r));
      reference[key] = r.bytes;
    }
    ASSERT_EQ(table.size(), reference.size());
  }
  for (const auto& [key, bytes] : reference) {
    const AllocRecord* r = table.Find(key, AllocKind::kPool);
    ASSERT_NE(r, nullptr);
    EXPECT_EQ(r->bytes, bytes);
  }
  table.Clear();
  EXPECT_EQ(table.size(), 0u);
}

class EnvTest : public ::testing::Test {
 protected:
  void TearDown() override {
    for (const char* name :
         {"CUDA_DEVICE_MEMORY_LIMIT", "CUDA_DEVICE_MEMORY_LIMIT_0", "CUDA_DEVICE_MEMORY_LIMIT_1",
          "CUDA_DEVICE_MEMORY_LIMIT_3", "CUDA_DEVICE_SM_LIMIT", "CUDA_DEVICE_SM_LIMIT_2",
          "CUDA_DISABLE_CONTROL", "GPU_CORE_UTILIZATION_POLICY", "CUDA_DEVICE_MEMORY_SHARED_CACHE",
          "LIBCUDA_LOG_LEVEL"}) {
      unsetenv(name);
    }
  }
};

TEST_F(EnvTest, PerDeviceMemoryLimitWinsOverTheGlobalOne) {
  setenv("CUDA_DEVICE_MEMORY_LIMIT", "4g", 1);
  setenv("CUDA_DEVICE_MEMORY_LIMIT_1", "1024m", 1);
  EXPECT_EQ(MemoryLimitForOrdinal(0).bytes, uint64_t{4} << 30);
  EXPECT_EQ(MemoryLimitForOrdinal(1).bytes, uint64_t{1} << 30);
  EXPECT_EQ(MemoryLimitForOrdinal(2).bytes, uint64_t{4} << 30);
  EXPECT_EQ(MemoryLimitForOrdinal(2).source, LimitSource::kValue);
}

// Issue 14 item 1: a malformed value never weakens a valid one. It used to mean "no limit", and a
// malformed per-device value overrode a valid global one.
TEST_F(EnvTest, MalformedMemoryLimitFailsClosed) {
  setenv("CUDA_DEVICE_MEMORY_LIMIT", "lots", 1);
  EXPECT_EQ(MemoryLimitForOrdinal(0).source, LimitSource::kInvalid);
  setenv("CUDA_DEVICE_MEMORY_LIMIT", "1g", 1);
  for (const char* bad : {"garbage", "-5", "1.5g", "", "4x"}) {
    SCOPED_TRACE(bad);
    setenv("CUDA_DEVICE_MEMORY_LIMIT_0", bad, 1);
    EXPECT_EQ(MemoryLimitForOrdinal(0).source, LimitSource::kInvalid);
    // Other devices keep the valid global value.
    EXPECT_EQ(MemoryLimitForOrdinal(1).source, LimitSource::kValue);
    EXPECT_EQ(MemoryLimitForOrdinal(1).bytes, uint64_t{1} << 30);
  }
  // A malformed global value does not touch a device with a valid value of its own.
  setenv("CUDA_DEVICE_MEMORY_LIMIT", "-5", 1);
  setenv("CUDA_DEVICE_MEMORY_LIMIT_0", "2g", 1);
  EXPECT_EQ(MemoryLimitForOrdinal(0).bytes, uint64_t{2} << 30);
  EXPECT_EQ(MemoryLimitForOrdinal(1).source, LimitSource::kInvalid);
  unsetenv("CUDA_DEVICE_MEMORY_LIMIT");
  unsetenv("CUDA_DEVICE_MEMORY_LIMIT_0");
  EXPECT_EQ(MemoryLimitForOrdinal(0).source, LimitSource::kUnset);
}

TEST_F(EnvTest, AnyMemoryLimitVariableButAValidZeroCountsAsRequested) {
  Config config;
  LoadConfig(&config);
  EXPECT_FALSE(config.memory_limit_requested);
  setenv("CUDA_DEVICE_MEMORY_LIMIT", "0", 1);
  LoadConfig(&config);
  EXPECT_FALSE(config.memory_limit_requested);
  setenv("CUDA_DEVICE_MEMORY_LIMIT_3", "junk", 1);
  LoadConfig(&config);
  EXPECT_TRUE(config.memory_limit_requested);
  unsetenv("CUDA_DEVICE_MEMORY_LIMIT_3");
  setenv("CUDA_DEVICE_MEMORY_LIMIT", "1g", 1);
  LoadConfig(&config);
  EXPECT_TRUE(config.memory_limit_requested);
}

TEST_F(EnvTest, SmLimitOfHundredOrGarbageMeansNone) {
  setenv("CUDA_DEVICE_SM_LIMIT", "100", 1);
  EXPECT_EQ(SmLimitForOrdinal(0), 0u);
  setenv("CUDA_DEVICE_SM_LIMIT", "30", 1);
  setenv("CUDA_DEVICE_SM_LIMIT_2", "150", 1);
  EXPECT_EQ(SmLimitForOrdinal(0), 30u);
  // A malformed per-device value falls back to the valid global one, never to "no limit".
  EXPECT_EQ(SmLimitForOrdinal(2), 30u);
  unsetenv("CUDA_DEVICE_SM_LIMIT");
  EXPECT_EQ(SmLimitForOrdinal(2), 0u);
  // Issue 14 item 6: decimal spellings of whole percentages.
  setenv("CUDA_DEVICE_SM_LIMIT", "30.0", 1);
  EXPECT_EQ(SmLimitForOrdinal(0), 30u);
  setenv("CUDA_DEVICE_SM_LIMIT", "1e2", 1);
  EXPECT_EQ(SmLimitForOrdinal(0), 0u);  // 100 %: no limit.
}

TEST_F(EnvTest, ProcessSettings) {
  setenv("CUDA_DISABLE_CONTROL", "TRUE", 1);
  setenv("GPU_CORE_UTILIZATION_POLICY", "Force", 1);
  setenv("CUDA_DEVICE_SM_LIMIT", "30", 1);
  setenv("CUDA_DEVICE_MEMORY_SHARED_CACHE", "/tmp/x.cache", 1);
  setenv("LIBCUDA_LOG_LEVEL", "0", 1);
  Config config;
  LoadConfig(&config);
  EXPECT_TRUE(config.disabled);
  EXPECT_EQ(config.policy, quota::UtilizationPolicy::kForce);
  EXPECT_TRUE(config.sm_limit_configured);
  EXPECT_STREQ(config.region_path, "/tmp/x.cache");
  EXPECT_EQ(config.log_level, 0);
}

TEST_F(EnvTest, DefaultsWithoutEnvironment) {
  Config config;
  LoadConfig(&config);
  EXPECT_FALSE(config.disabled);
  EXPECT_FALSE(config.sm_limit_configured);
  EXPECT_STREQ(config.region_path, kDefaultRegionPath);
  EXPECT_EQ(config.policy, quota::UtilizationPolicy::kDefault);
}

TEST_F(EnvTest, DisablePolicyTurnsSmLimitingOff) {
  setenv("CUDA_DEVICE_SM_LIMIT", "30", 1);
  setenv("GPU_CORE_UTILIZATION_POLICY", "disable", 1);
  Config config;
  LoadConfig(&config);
  EXPECT_FALSE(config.sm_limit_configured);
}

TEST(LivenessTest, SelfIsAliveWithItsStartTime) {
  const uint64_t start = ProcessStartTime(getpid());
  EXPECT_GT(start, 0u);
  EXPECT_TRUE(IsProcessAlive(getpid(), start));
  EXPECT_FALSE(IsProcessAlive(getpid(), start + 1));  // A reused PID.
}

TEST(LivenessTest, ExitedAndZombieChildrenAreDead) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(0);
  // Until reaped, the child is a zombie: its memory is gone, so it counts as dead already.
  for (int i = 0; i < 1000 && IsProcessAlive(child, 0); ++i) usleep(1000);
  EXPECT_FALSE(IsProcessAlive(child, 0));
  waitpid(child, nullptr, 0);
  EXPECT_FALSE(IsProcessAlive(child, 0));
  EXPECT_EQ(ProcessStartTime(child), 0u);
}

// What the lock-word reset relies on (region.cc, ResetDamagedLockWord): a process that maps the
// region file is recognized as such, one that does not is not, and an unreadable one is "cannot
// tell", never "does not".
TEST(LivenessTest, TellsWhichProcessesMapAFile) {
  char path[] = "/tmp/prism-maps-test-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 4096), 0);
  void* memory = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ASSERT_NE(memory, MAP_FAILED);
  close(fd);
  MappedFile file;
  ASSERT_TRUE(FindOwnMapping(static_cast<char*>(memory) + 100, &file));
  EXPECT_NE(file.dev_inode[0], '\0');
  EXPECT_STREQ(file.path, path);
  EXPECT_EQ(ProcessMapsFile(getpid(), file), 1);
  const pid_t child = fork();  // Maps nothing of ours once it has exec'ed.
  ASSERT_GE(child, 0);
  if (child == 0) {
    execlp("sleep", "sleep", "10", static_cast<char*>(nullptr));
    _exit(127);
  }
  // Until exec, the child still has the parent's mappings.
  int maps = 1;
  for (int i = 0; i < 2000 && maps == 1; ++i) {
    maps = ProcessMapsFile(child, file);
    if (maps == 1) usleep(1000);
  }
  EXPECT_EQ(maps, 0);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  EXPECT_EQ(ProcessMapsFile(child, file), -1);  // Gone: cannot tell.
  MappedFile stack;
  int local = 0;
  EXPECT_TRUE(FindOwnMapping(&local, &stack));
  EXPECT_EQ(stack.dev_inode[0], '\0');  // Anonymous.
  munmap(memory, 4096);
  unlink(path);
}

TEST(UuidTest, FormatsAndParsesNvmlSpelling) {
  const uint8_t bytes[16] = {0x50, 0x52, 0x49, 0x53, 0x4d, 0x2d, 0x46, 0x41,
                             0x4b, 0x45, 0x2d, 0x47, 0x50, 0x55, 0x00, 0xab};
  char text[64];
  FormatNvmlUuid(bytes, text);
  EXPECT_STREQ(text, "GPU-50524953-4d2d-4641-4b45-2d47505500ab");
  uint8_t parsed[16];
  ASSERT_TRUE(ParseNvmlUuid(text, parsed));
  EXPECT_EQ(memcmp(parsed, bytes, 16), 0);
  ASSERT_TRUE(ParseNvmlUuid("MIG-50524953-4D2D-4641-4B45-2D47505500AB", parsed));
  EXPECT_EQ(memcmp(parsed, bytes, 16), 0);
  EXPECT_FALSE(ParseNvmlUuid("GPU-1234", parsed));
  EXPECT_FALSE(ParseNvmlUuid("GPU-50524953-4d2d-4641-4b45-2d47505500abcd", parsed));
  EXPECT_FALSE(ParseNvmlUuid("GPU-5052494d-2d46-414b-452d-47505500zzab", parsed));
}

}  // namespace
}  // namespace prism::vgpu
