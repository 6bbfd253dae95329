#include "sim/trace.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace prism::sim {
namespace {

using ::testing::HasSubstr;

std::string Message(const absl::Status& s) { return std::string(s.message()); }

TEST(ParsePodCsvTest, ReadsEveryColumnOfTheFullFormat) {
  auto pods = ParsePodCsv(
      "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
      "deletion_time,scheduled_time\n"
      "p0,12000,16384,1,460,V100M16|V100M32,LS,Running,10,20,11\n"
      "p1,4000,0,0,0,,BE,Pending,5,9,\n",
      "pods.csv");
  ASSERT_TRUE(pods.ok()) << pods.status();
  ASSERT_EQ(pods->size(), 2u);
  const TracePod& p0 = (*pods)[0];
  EXPECT_EQ(p0.name, "p0");
  EXPECT_EQ(p0.milli_cpu, 12000);
  EXPECT_EQ(p0.memory_mib, 16384);
  EXPECT_EQ(p0.num_gpu, 1);
  EXPECT_EQ(p0.gpu_milli, 460);
  EXPECT_EQ(p0.gpu_spec, "V100M16|V100M32");
  EXPECT_EQ(p0.qos, "LS");
  EXPECT_EQ(p0.phase, "Running");
  EXPECT_EQ(p0.creation_time, 10);
  EXPECT_EQ(p0.deletion_time, 20);
  EXPECT_EQ(p0.scheduled_time, 11);
  EXPECT_FALSE((*pods)[1].scheduled_time.has_value());
  EXPECT_EQ((*pods)[1].TotalGpuMilli(), 0);
}

TEST(ParsePodCsvTest, ReadsTheFiveColumnMultiGpuFormatInAnyColumnOrder) {
  auto pods = ParsePodCsv("gpu_milli,name,num_gpu,memory_mib,cpu_milli\n1000,p,8,1024,64000\n",
                          "multigpu.csv");
  ASSERT_TRUE(pods.ok()) << pods.status();
  EXPECT_EQ((*pods)[0].num_gpu, 8);
  EXPECT_EQ((*pods)[0].TotalGpuMilli(), 8000);
  EXPECT_FALSE((*pods)[0].creation_time.has_value());
}

TEST(ParsePodCsvTest, DropsEmptyModelNamesFromTheSpec) {
  auto pods =
      ParsePodCsv("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\np,1,1,1,10,|T4||\n", "x");
  ASSERT_TRUE(pods.ok()) << pods.status();
  EXPECT_EQ((*pods)[0].gpu_spec, "T4");
}

TEST(ParsePodCsvTest, ErrorsNameTheSourceLineAndColumn) {
  auto missing = ParsePodCsv("name,cpu_milli,memory_mib,num_gpu\np,1,1,1\n", "a.csv");
  EXPECT_THAT(Message(missing.status()),
              HasSubstr("a.csv:1: the header has no 'gpu_milli' column"));

  auto negative = ParsePodCsv("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,-5,1,0,0\n", "b.csv");
  EXPECT_THAT(Message(negative.status()), HasSubstr("b.csv:2: cpu_milli is -5, outside"));

  auto text = ParsePodCsv("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,abc,0,0\n", "c.csv");
  EXPECT_THAT(Message(text.status()), HasSubstr("c.csv:2: memory_mib is not an integer: 'abc'"));

  auto share = ParsePodCsv("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,1,1500\n", "d.csv");
  EXPECT_THAT(Message(share.status()), HasSubstr("gpu_milli is 1500, outside the allowed range"));

  auto zero = ParsePodCsv("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,2,0\n", "e.csv");
  EXPECT_THAT(Message(zero.status()), HasSubstr("gpu_milli is 0 but num_gpu is not"));

  // Issue 13, finding 6: a GPU share of no GPU was silently dropped.
  auto no_gpu = ParsePodCsv("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,0,500\n", "g.csv");
  EXPECT_THAT(Message(no_gpu.status()), HasSubstr("g.csv:2: gpu_milli is 500 but num_gpu is 0"));
  auto width = ParsePodCsv("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1\n", "f.csv");
  EXPECT_THAT(Message(width.status()),
              HasSubstr("f.csv:2: the row has 3 fields, the header has 5"));

  auto empty = ParsePodCsv("", "g.csv");
  EXPECT_THAT(Message(empty.status()), HasSubstr("g.csv"));

  auto times = ParsePodCsv(
      "name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time,deletion_time\np,1,1,0,0,9,3\n",
      "h.csv");
  EXPECT_THAT(Message(times.status()), HasSubstr("deletion_time (3) is before creation_time (9)"));
}

TEST(ParseNodeCsvTest, ReadsNodesAndRejectsDuplicates) {
  auto nodes = ParseNodeCsv(
      "sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,2,P100\n"
      "n1,32000,1024,0,\n",
      "nodes.csv");
  ASSERT_TRUE(nodes.ok()) << nodes.status();
  EXPECT_EQ((*nodes)[0].model, "P100");
  EXPECT_EQ((*nodes)[0].gpus, 2);
  EXPECT_EQ((*nodes)[1].model, "");

  auto dup = ParseNodeCsv("sn,cpu_milli,memory_mib,gpu,model\nn0,1,1,1,T4\nn0,1,1,1,T4\n", "n.csv");
  EXPECT_THAT(Message(dup.status()), HasSubstr("n.csv:3: sn 'n0' repeats the node on line 2"));
  auto no_model = ParseNodeCsv("sn,cpu_milli,memory_mib,gpu,model\nn0,1,1,1,\n", "m.csv");
  EXPECT_THAT(Message(no_model.status()), HasSubstr("model is empty for a node with GPUs"));
}

TEST(EmbeddedDefaultTraceTest, IsTheFgdPapersDefaultTrace) {
  const Trace& t = EmbeddedDefaultTrace();
  EXPECT_EQ(t.nodes.size(), 1213u);
  EXPECT_EQ(t.pods.size(), 8152u);
  int gpus = 0;
  for (const TraceNode& n : t.nodes) gpus += n.gpus;
  EXPECT_EQ(gpus, 6212);
  int64_t milli = 0;
  for (const TracePod& p : t.pods) milli += p.TotalGpuMilli();
  EXPECT_EQ(milli, 6086800);  // 98 % of capacity.
}

}  // namespace
}  // namespace prism::sim
