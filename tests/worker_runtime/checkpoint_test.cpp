#include "worker_runtime/checkpoint.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <numeric>

#include "common/error.hpp"
#include "rendezvous/memory_store.hpp"
#include "test_support.hpp"
#include "tests/support/files.hpp"
#include "tests/support/python.hpp"
#include "tests/support/temp_dir.hpp"
#include "worker_runtime/gloo_process_group.hpp"

using namespace ddp::worker_runtime;
using namespace ddp::worker_runtime::test;
using namespace ddp::test;
using Catch::Matchers::Contains;
using namespace std::chrono_literals;

namespace {

struct Model {
  std::vector<float> w = std::vector<float>(6);
  std::vector<float> b = std::vector<float>(3);
  std::vector<float> m = std::vector<float>(6);  // an optimizer moment
  explicit Model(float base) {
    std::iota(w.begin(), w.end(), base);
    std::iota(b.begin(), b.end(), -base);
    std::iota(m.begin(), m.end(), base * 0.5f);
  }
  [[nodiscard]] std::vector<TensorRef> refs() const {
    return {
        {"fc.weight", {3, 2}, w}, {"fc.bias", {3}, b}, {"optimizer.exp_avg.fc.weight", {3, 2}, m}};
  }
};

TrainingState sample_state() {
  TrainingState s;
  s.epoch = 3;
  s.position_in_epoch = 128;
  s.global_step = 1000;
  s.world_size = 2;
  s.seed = 42;
  s.optimizer = {{"lr", 0.01}, {"step", 1000}};
  s.extra = {{"best_accuracy", 0.97}};
  return s;
}

void write_bytes(const std::filesystem::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << bytes;
}

}  // namespace

TEST_CASE("checkpoint round trip keeps tensors and training state", "[checkpoint]") {
  TempDir dir;
  const auto path = (dir.path() / "ckpt.safetensors").string();
  const Model model(1.5f);
  save_checkpoint(path, model.refs(), sample_state());
  const Checkpoint c = load_checkpoint(path);
  REQUIRE(c.tensors.size() == 3);
  CHECK(c.tensors.at("fc.weight").data == model.w);
  CHECK(c.tensors.at("fc.weight").shape == std::vector<int64_t>{3, 2});
  CHECK(c.tensors.at("fc.bias").data == model.b);
  CHECK(c.state.epoch == 3);
  CHECK(c.state.position_in_epoch == 128);
  CHECK(c.state.global_step == 1000);
  CHECK(c.state.world_size == 2);
  CHECK(c.state.seed == 42);
  CHECK(c.state.optimizer.at("lr").get<double>() == 0.01);
  CHECK(c.state.extra.at("best_accuracy").get<double>() == 0.97);
  // The state copy beside the weights is readable JSON.
  CHECK_THAT(read_file(path + ".json"), Contains("\"position_in_epoch\": 128"));

  Model restored(0.0f);
  restore_tensor(c, "fc.weight", {3, 2}, restored.w);
  CHECK(restored.w == model.w);
  CHECK_THROWS_WITH(restore_tensor(c, "fc.weight", {2, 3}, restored.w),
                    Contains("'fc.weight' has shape [3, 2], the model expects [2, 3]"));
  CHECK_THROWS_WITH(restore_tensor(c, "fc2.weight", {3, 2}, restored.w),
                    Contains("no tensor 'fc2.weight'"));
}

TEST_CASE("a checkpoint is readable by a safetensors-style Python reader", "[checkpoint][python]") {
  TempDir dir;
  const auto path = (dir.path() / "ckpt.safetensors").string();
  const Model model(2.0f);
  save_checkpoint(path, model.refs(), sample_state());
  // The safetensors layout, read with nothing but struct and json.
  const std::string script =
      "import json, struct, sys\n"
      "f = open(sys.argv[1], 'rb').read()\n"
      "(n,) = struct.unpack('<Q', f[:8])\n"
      "h = json.loads(f[8:8 + n])\n"
      "data = f[8 + n:]\n"
      "t = h['fc.weight']\n"
      "a, b = t['data_offsets']\n"
      "vals = struct.unpack('<%df' % ((b - a) // 4), data[a:b])\n"
      "st = json.loads(h['__metadata__']['ddp_training_state'])\n"
      "print(t['dtype'], t['shape'], list(vals), st['epoch'], h['__metadata__']['format'])\n";
  write_bytes(dir.path() / "read.py", script);
  const auto run = run_python({(dir.path() / "read.py").string(), path}, 120s);
  CHECK(run.exit_code == 0);
  CHECK(run.output == "F32 [3, 2] [2.0, 3.0, 4.0, 5.0, 6.0, 7.0] 3 pt\n");
}

TEST_CASE("truncated, corrupt and malformed checkpoints are refused", "[checkpoint]") {
  TempDir dir;
  const auto path = (dir.path() / "ckpt.safetensors").string();
  save_checkpoint(path, Model(1.0f).refs(), sample_state());
  const std::string good = read_file(path);
  const auto bad = dir.path() / "bad.safetensors";

  write_bytes(bad, good.substr(0, good.size() - 5));
  CHECK_THROWS_WITH(load_checkpoint(bad.string()), Contains("truncated"));
  write_bytes(bad, good.substr(0, 5));
  CHECK_THROWS_WITH(load_checkpoint(bad.string()), Contains("truncated: 5 bytes"));
  write_bytes(bad, good.substr(0, 40));
  CHECK_THROWS_WITH(load_checkpoint(bad.string()), Contains("truncated or not safetensors"));

  std::string flipped = good;
  flipped[flipped.size() - 3] = static_cast<char>(flipped[flipped.size() - 3] ^ 0x40);
  write_bytes(bad, flipped);
  CHECK_THROWS_WITH(load_checkpoint(bad.string()), Contains("corrupt: CRC-32"));

  std::string header_broken = good;
  header_broken[8] = '#';  // the header's opening brace
  write_bytes(bad, header_broken);
  CHECK_THROWS_WITH(load_checkpoint(bad.string()), Contains("corrupt header"));

  write_bytes(bad, good + "extra");
  CHECK_THROWS_WITH(load_checkpoint(bad.string()), Contains("cover"));

  CHECK_THROWS_WITH(load_checkpoint((dir.path() / "missing").string()),
                    Contains("cannot open checkpoint") && Contains("No such file"));
  CHECK_THROWS_AS(load_checkpoint(bad.string()), ddp::CheckpointError);

  std::vector<float> three(3);
  CHECK_THROWS_WITH(save_checkpoint(path, {{"x", {2, 2}, three}}, {}),
                    Contains("'x' has shape [2, 2] but 3 elements"));
  CHECK_THROWS_WITH(save_checkpoint(path, {{"x", {3}, three}, {"x", {3}, three}}, {}),
                    Contains("used twice"));
  CHECK(load_checkpoint(path).tensors.size() == 3);  // the failed saves left the old file
}

TEST_CASE("a writer killed mid-write leaves the previous checkpoint whole", "[checkpoint]") {
  TempDir dir;
  const auto path = (dir.path() / "ckpt.safetensors").string();
  save_checkpoint(path, Model(1.0f).refs(), sample_state());
  // The child rewrites a 64 MiB checkpoint forever; SIGKILL lands mid-write.
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    std::vector<float> big(16 * 1024 * 1024, 7.0f);
    for (;;) {
      try {
        save_checkpoint(path, {{"big", {static_cast<int64_t>(big.size())}, big}}, {});
      } catch (...) {
        ::_exit(3);
      }
    }
  }
  // Wait until a temp file exists (a write is in progress), then kill.
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  bool writing = false;
  while (!writing && std::chrono::steady_clock::now() < deadline) {
    for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
      writing = writing || e.path().string().find(".tmp.") != std::string::npos;
    }
  }
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  CHECK(writing);
  const Checkpoint c = load_checkpoint(path);  // whole: the old one or a complete new one
  if (c.tensors.count("big") == 1) {
    CHECK(c.tensors.at("big").data.size() == 16u * 1024 * 1024);
  } else {
    CHECK(c.tensors.at("fc.weight").data == Model(1.0f).w);
  }
}

TEST_CASE("rank 0 writes and every rank learns the outcome", "[checkpoint][gloo]") {
  TempDir dir;
  auto store = std::make_shared<ddp::rendezvous::MemoryStore>();
  run_ranks(2, [&](int rank) {
    GlooOptions o;
    o.rank = rank;
    o.size = 2;
    o.bind_addr = "127.0.0.1";
    o.timeout = 20s;
    o.connect_timeout = 20s;
    GlooProcessGroup pg(store, o);
    const Model model(static_cast<float>(rank));  // only rank 0's content is written
    const auto path = (dir.path() / "ckpt.safetensors").string();
    save_checkpoint_on_rank0(pg, path, model.refs(), sample_state());
    RT_LOCKED(CHECK(load_checkpoint(path).tensors.at("fc.weight").data == Model(0.0f).w));
    const auto bad = (dir.path() / "no_such_dir" / "x.safetensors").string();
    const std::string error =
        error_of([&] { save_checkpoint_on_rank0(pg, bad, model.refs(), sample_state()); });
    RT_LOCKED(CHECK_THAT(error, Contains(rank == 0 ? "cannot create" : "rank 0 failed to write")));
  });
}
