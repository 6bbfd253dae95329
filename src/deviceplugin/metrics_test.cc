#include "deviceplugin/metrics.h"

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
