// The MLP's gradients, the optimizers' update rules and the learning-rate schedule.
#include <catch2/catch.hpp>
#include <cmath>

#include "common/error.hpp"
#include "trainer/lr_schedule.hpp"
#include "trainer/mlp.hpp"
#include "trainer/optimizer.hpp"
#include "trainer/rng.hpp"

using namespace ddp::trainer;
using Catch::Matchers::Contains;

namespace {

double mean_loss(Mlp& m, const std::vector<float>& x, const std::vector<int32_t>& y) {
  return m.evaluate(x, y).loss_sum / static_cast<double>(y.size());
}

}  // namespace

TEST_CASE("backward matches finite differences of the mean loss", "[model]") {
  Mlp m({5, 7, 6, 4});
  m.init(3);
  Rng rng(11);
  std::vector<float> x(8 * 5);
  for (float& v : x) v = static_cast<float>(rng.normal());
  const std::vector<int32_t> y{0, 1, 2, 3, 3, 2, 1, 0};
  std::vector<std::size_t> order;
  m.train_batch(x, y, [&](std::size_t l) { order.push_back(l); });
  CHECK(order == std::vector<std::size_t>{2, 1, 0});  // last layer's gradients are final first
  const std::vector<float> grads(m.gradients().begin(), m.gradients().end());
  const auto params = m.parameters();
  double worst = 0;
  for (std::size_t i = 0; i < params.size(); i += 3) {
    const float saved = params[i];
    constexpr float kH = 1e-2F;
    params[i] = saved + kH;
    const double up = mean_loss(m, x, y);
    params[i] = saved - kH;
    const double down = mean_loss(m, x, y);
    params[i] = saved;
    const double numeric = (up - down) / (2.0 * static_cast<double>(kH));
    worst = std::max(worst, std::fabs(numeric - static_cast<double>(grads[i])));
  }
  CHECK(worst < 2e-3);
}

TEST_CASE("the same seed gives the same initial parameters", "[model]") {
  Mlp a({64, 256, 10});
  Mlp b({64, 256, 10});
  a.init(5);
  b.init(5);
  CHECK(std::equal(a.parameters().begin(), a.parameters().end(), b.parameters().begin()));
  b.init(6);
  CHECK_FALSE(std::equal(a.parameters().begin(), a.parameters().end(), b.parameters().begin()));
  CHECK(a.parameters().size() == 64 * 256 + 256 + 256 * 10 + 10);
}

TEST_CASE("a bad layer size is refused", "[model]") {
  CHECK_THROWS_WITH(Mlp({4}), Contains("at least an input and an output"));
  CHECK_THROWS_WITH(Mlp({4, 0, 2}), Contains("zero size"));
}

TEST_CASE("SGD with momentum follows torch.optim.SGD", "[optim]") {
  OptimizerOptions o;
  o.name = "sgd";
  o.momentum = 0.9;
  auto opt = make_optimizer(o, 1);
  std::vector<float> p{1.0F};
  const std::vector<float> g{0.5F};
  opt->step(p, g, 0.1);
  CHECK(p[0] == Approx(0.95));
  opt->step(p, g, 0.1);
  CHECK(p[0] == Approx(0.95 - 0.1 * 0.95));  // buf = 0.9 * 0.5 + 0.5
}

TEST_CASE("AdamW's first step is lr * sign(g) after decoupled decay", "[optim]") {
  OptimizerOptions o;
  o.weight_decay = 0.01;
  auto opt = make_optimizer(o, 2);
  std::vector<float> p{1.0F, -2.0F};
  const std::vector<float> g{0.5F, -3.0F};
  opt->step(p, g, 0.1);
  CHECK(p[0] == Approx(1.0 * (1 - 0.001) - 0.1));
  CHECK(p[1] == Approx(-2.0 * (1 - 0.001) + 0.1));
  CHECK(opt->scalar_state()["step"] == 1);
  CHECK(opt->state_buffers().size() == 2);
}

TEST_CASE("optimizer names and hyper-parameters are checked", "[optim]") {
  OptimizerOptions o;
  o.name = "adam";
  CHECK_THROWS_WITH(make_optimizer(o, 1), Contains("'adam'") && Contains("sgd"));
  o.name = "sgd";
  o.momentum = 1.5;
  CHECK_THROWS_WITH(make_optimizer(o, 1), Contains("--momentum"));
}

TEST_CASE("warm-up rises linearly, then cosine decays to the floor", "[schedule]") {
  const LrSchedule s{1.0, 10, 110, 0.1};
  CHECK(s.at(0) == Approx(0.1));
  CHECK(s.at(9) == Approx(1.0));
  CHECK(s.at(10) == Approx(1.0));
  CHECK(s.at(60) == Approx(0.55));  // half-way: (1 + 0.1) / 2
  CHECK(s.at(110) == Approx(0.1));
  CHECK(s.at(500) == Approx(0.1));
  CHECK_THROWS_AS(validate(LrSchedule{0.0, 0, 1, 0}), ddp::ConfigError);
}
