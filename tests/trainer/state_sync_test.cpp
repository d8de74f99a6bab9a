// The trainer's state sync after an in-place recovery, with ranks in threads over Gloo: a
// fresh rank (not live) and a rank one step ahead both end with the source's parameters,
// optimizer state and position.
#include <catch2/catch.hpp>
#include <vector>

#include "rendezvous/store/memory_store.hpp"
#include "tests/worker_runtime/test_support.hpp"
#include "trainer/in_place.hpp"
#include "trainer/model.hpp"

using namespace ddp::trainer;
namespace wrt = ddp::worker_runtime::test;
using namespace std::chrono_literals;

namespace {

std::unique_ptr<Model> model_with_seed(uint64_t seed) {
  auto model = make_model(false, 0, {4, 8, 3}, OptimizerOptions{});
  model->init(seed);
  return model;
}

}  // namespace

TEST_CASE("state sync: the source's model and position reach every rank", "[in_place]") {
  auto store = std::make_shared<ddp::rendezvous::MemoryStore>();
  std::vector<std::vector<float>> params(3);
  std::vector<TrainingPosition> positions(3);
  std::vector<SyncOutcome> outcomes(3);
  wrt::run_ranks(3, [&](int rank) {
    auto pg = wrt::make_group(store, rank, 3);
    // Ranks 0 and 1 survived (rank 0 one step ahead); rank 2 is fresh (other init).
    auto model = model_with_seed(rank == 2 ? 99 : 7);
    TrainingPosition position{1, 40, rank == 0 ? 11 : 10, 440, 500};
    if (rank == 0) model->host_parameters()[0] += 1.0F;  // what its extra step changed
    if (rank == 1) model->load_optimizer_scalar_state({{"name", "adamw"}, {"step", 10}});
    if (rank == 2) position = TrainingPosition{};
    bool live = rank != 2;
    const SyncOutcome out = sync_training_state(*pg, *model, position, live);
    const auto p = model->host_parameters();
    params[static_cast<size_t>(rank)].assign(p.begin(), p.end());
    positions[static_cast<size_t>(rank)] = position;
    outcomes[static_cast<size_t>(rank)] = out;
    RT_LOCKED(CHECK(model->optimizer_scalar_state()["step"] == 10));
  });
  for (int r = 0; r < 3; ++r) {
    INFO("rank " << r);
    CHECK(outcomes[static_cast<size_t>(r)].agreement ==
          ddp::worker_runtime::StateAgreement{true, 10, 1, true});
    CHECK(outcomes[static_cast<size_t>(r)].state_bytes > 0);
    CHECK(params[static_cast<size_t>(r)] == params[1]);
    CHECK(positions[static_cast<size_t>(r)] == TrainingPosition{1, 40, 10, 440, 500});
  }
}

TEST_CASE("state sync: a rank past the epoch's end takes the state of one still at its end",
          "[in_place]") {
  auto store = std::make_shared<ddp::rendezvous::MemoryStore>();
  std::vector<TrainingPosition> positions(2);
  std::vector<SyncOutcome> outcomes(2);
  std::vector<int> lives(2);
  wrt::run_ranks(2, [&](int rank) {
    auto pg = wrt::make_group(store, rank, 2);
    auto model = model_with_seed(7);
    // Same step: rank 0 validated, saved and moved to epoch 1; rank 1 failed in validation.
    TrainingPosition position =
        rank == 0 ? TrainingPosition{1, 0, 30, 960, 500} : TrainingPosition{0, 960, 30, 960, 500};
    bool live = true;
    outcomes[static_cast<size_t>(rank)] = sync_training_state(*pg, *model, position, live);
    positions[static_cast<size_t>(rank)] = position;
    lives[static_cast<size_t>(rank)] = live ? 1 : 0;
  });
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r);
    CHECK(outcomes[static_cast<size_t>(r)].agreement ==
          ddp::worker_runtime::StateAgreement{true, 30, 1, true});
    // Both redo the end of epoch 0 (validation, checkpoint) before epoch 1.
    CHECK(positions[static_cast<size_t>(r)] == TrainingPosition{0, 960, 30, 960, 500});
  }
  CHECK(lives == std::vector<int>{0, 1});  // the receiver is not live until its caller says so
}
