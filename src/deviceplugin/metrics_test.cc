#include "deviceplugin/metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"

namespace prism::deviceplugin {
namespace {

using ::testing::HasSubstr;

TEST(MetricsTest, RendersPrometheusText) {
  MetricsRegistry r;
  r.Declare("x_total", MetricsRegistry::Type::kCounter, "Things");
  r.Declare("lat_seconds", MetricsRegistry::Type::kHistogram, "Latency", {0.1, 1});
  r.Add("x_total", 2, {{"result", "ok"}});
  r.Add("x_total", 1, {{"result", "ok"}});
  r.Observe("lat_seconds", 0.05);
  r.Observe("lat_seconds", 0.5);
  r.Observe("lat_seconds", 5);
  const std::string text = r.Render();
  EXPECT_THAT(text, HasSubstr("# TYPE x_total counter\n"));
  EXPECT_THAT(text, HasSubstr("x_total{result=\"ok\"} 3\n"));
  EXPECT_THAT(text, HasSubstr("lat_seconds_bucket{le=\"0.10000000000000001\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("lat_seconds_bucket{le=\"1\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("lat_seconds_bucket{le=\"+Inf\"} 3\n"));
  EXPECT_THAT(text, HasSubstr("lat_seconds_count 3\n"));
  EXPECT_EQ(r.Value("x_total", {{"result", "ok"}}), 3);
}

TEST(MetricsTest, CollectorsReplaceWholeFamiliesBeforeEachRender) {
  MetricsRegistry r;
  r.Declare("usage_bytes", MetricsRegistry::Type::kGauge, "Usage");
  std::map<MetricLabels, double> next{{{{"pod", "a"}}, 1}, {{{"pod", "b"}}, 2}};
  const int id = r.AddCollector([&] { r.ReplaceSeries("usage_bytes", next); });
  std::string text = r.Render();
  EXPECT_THAT(text, HasSubstr("usage_bytes{pod=\"a\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("usage_bytes{pod=\"b\"} 2\n"));
  next.erase({{"pod", "a"}});
  text = r.Render();
  EXPECT_THAT(text, ::testing::Not(HasSubstr("pod=\"a\"")));
  EXPECT_THAT(text, HasSubstr("usage_bytes{pod=\"b\"} 2\n"));
  r.RemoveCollector(id);
  next.clear();
  EXPECT_THAT(r.Render(), HasSubstr("usage_bytes{pod=\"b\"} 2\n"));  // No longer collected.
  EXPECT_THAT(r.FamilyNames(), ::testing::ElementsAre("usage_bytes"));
}

// Issue 13 #4: the kubelet restarts the agent when /healthz goes unanswered. With cpp-httplib's
// fixed pool (8 workers, or one per core less one) that many idle connections to the metrics
// port were enough; now no number of them is.
TEST(MetricsTest, IdleConnectionsDoNotStarveTheProbes) {
  MetricsRegistry r;
  MetricsServer server(&r, {"127.0.0.1", 0});
  ASSERT_TRUE(server.Start().ok());
  std::vector<int> idle;
  for (int i = 0; i < 100; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(server.port()));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    idle.push_back(fd);
  }
  absl::SleepFor(absl::Milliseconds(200));  // Let the server accept them all.
  httplib::Client client("127.0.0.1", server.port());
  client.set_read_timeout(10, 0);
  const absl::Time start = absl::Now();
  auto res = client.Get("/healthz");
  const absl::Duration took = absl::Now() - start;
  for (int fd : idle) close(fd);
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200);
  EXPECT_LT(took, absl::Seconds(1));
}

TEST(MetricsTest, ServesMetricsAndProbes) {
  MetricsRegistry r;
  r.Declare("up", MetricsRegistry::Type::kGauge, "Up");
  r.Set("up", 1);
  std::string ready_problem = "not registered";
  MetricsServer server(&r, {"127.0.0.1", 0}, nullptr, [&] { return ready_problem; });
  ASSERT_TRUE(server.Start().ok());
  httplib::Client client("127.0.0.1", server.port());
  auto res = client.Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_THAT(res->body, HasSubstr("up 1\n"));
  EXPECT_EQ(client.Get("/healthz")->status, 200);
  EXPECT_EQ(client.Get("/readyz")->status, 503);
  ready_problem.clear();
  EXPECT_EQ(client.Get("/readyz")->status, 200);
  server.Stop();
}

}  // namespace
}  // namespace prism::deviceplugin
