#include "worker_runtime/checkpoint.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstring>
#include <fstream>
#include <numeric>

#include "common/error.hpp"
#include "rendezvous/store/memory_store.hpp"
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

TEST_CASE("forged shapes, CRCs and state fields are refused, not trusted", "[checkpoint]") {
  // Found by tests/fuzz/checkpoint_fuzz: a shape whose byte size overflows int64 passed the
  // size checks (then UB or a huge allocation), a numeric CRC escaped as a JSON type error,
  // and a state field of 1e300 was cast to int64 (UB).
  TempDir dir;
  const auto bad = dir.path() / "forged.safetensors";
  auto with_header = [](const std::string& header) {
    std::string bytes(8, '\0');
    const uint64_t n = header.size();
    std::memcpy(bytes.data(), &n, 8);
    return bytes + header;
  };
  write_bytes(bad, with_header(R"({"t":{"dtype":"F32","shape":[4611686018427387904,4],)"
                               R"("data_offsets":[0,0]}})"));
  CHECK_THROWS_WITH(load_checkpoint(bad.string()), Contains("offsets that do not match"));
  write_bytes(bad, with_header(R"({"t":{"dtype":"F32","shape":[4611686018427387904],)"
                               R"("data_offsets":[0,0]}})"));
  CHECK_THROWS_WITH(load_checkpoint(bad.string()), Contains("offsets that do not match"));
  write_bytes(bad, with_header(R"({"__metadata__":{"ddp_crc32":5}})"));
  CHECK_THROWS_WITH(load_checkpoint(bad.string()), Contains("ddp_crc32 is 5"));
  const std::string state =
      R"({\"epoch\":1e300,\"position_in_epoch\":0,\"global_step\":0,\"world_size\":1,\"seed\":0})";
  write_bytes(bad, with_header(R"({"__metadata__":{"ddp_training_state":")" + state + R"("}})"));
  CHECK_THROWS_WITH(load_checkpoint(bad.string()), Contains("epoch is 1e+300"));
  const std::string big_world =
      R"({\"epoch\":1,\"position_in_epoch\":0,\"global_step\":0,\"world_size\":4294967297,\"seed\":0})";
  write_bytes(bad,
              with_header(R"({"__metadata__":{"ddp_training_state":")" + big_world + R"("}})"));
  CHECK_THROWS_WITH(load_checkpoint(bad.string()), Contains("world_size is 4294967297"));
  // Found by the fuzzer in CI: float offsets and shapes were converted to integers (UB).
  write_bytes(bad, with_header(R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0,1e300]}})"));
  CHECK_THROWS_WITH(load_checkpoint(bad.string()),
                    Contains("data_offsets holds 1e+300, expected integers >= 0"));
  write_bytes(bad, with_header(R"({"t":{"dtype":"F32","shape":[2.5],"data_offsets":[0,4]}})"));
  CHECK_THROWS_WITH(load_checkpoint(bad.string()), Contains("shape holds 2.5, expected integers"));
  write_bytes(bad, with_header(R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})"));
  CHECK_THROWS_WITH(load_checkpoint(bad.string()), Contains("data_offsets holds -4"));
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

namespace {

// A child that rewrites a 64 MiB checkpoint at path forever, SIGKILLed while a temp file
// exists (mid-write); returns its pid (dead and reaped).
pid_t kill_a_writer_mid_write(const std::filesystem::path& dir, const std::string& path) {
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
  const std::string mine = "." + std::to_string(pid);  // <path>.tmp.<host>.<pid>
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  bool writing = false;
  while (!writing && std::chrono::steady_clock::now() < deadline) {
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
      const auto name = e.path().string();
      writing = writing || (name.find(".tmp.") != std::string::npos && name.ends_with(mine));
    }
  }
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  REQUIRE(writing);
  return pid;
}

std::vector<std::string> temp_files(const std::filesystem::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    auto name = e.path().filename().string();
    if (name.find(".tmp.") != std::string::npos) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string this_host() {
  char buf[256] = {};
  ::gethostname(buf, sizeof(buf) - 1);
  return buf;
}

}  // namespace

TEST_CASE("temp files of killed writers go at the next save or load, live ones stay",
          "[checkpoint]") {
  TempDir dir;
  const auto path = (dir.path() / "ckpt.safetensors").string();
  const pid_t dead = kill_a_writer_mid_write(dir.path(), path);
  const std::string killed_temp =
      "ckpt.safetensors.tmp." + this_host() + "." + std::to_string(dead);
  REQUIRE(temp_files(dir.path()) == std::vector<std::string>{killed_temp});

  // Left alone: a live writer's (its lock is held), another host's (its lock means nothing
  // here), an old-style one whose pid lives, and other checkpoints' temp files.
  const std::string live = "ckpt.safetensors.tmp." + this_host() + ".999999999";
  const std::string other_host = "ckpt.safetensors.tmp.otherhost." + std::to_string(dead);
  const std::string old_live = "ckpt.safetensors.tmp." + std::to_string(::getpid());
  const std::string other_file =
      "other.safetensors.tmp." + this_host() + "." + std::to_string(dead);
  const std::string old_dead = "ckpt.safetensors.tmp." + std::to_string(dead);  // removed
  for (const auto& name : {live, other_host, old_live, other_file, old_dead}) {
    write_bytes(dir.path() / name, "partial");
  }
  const int held = ::open((dir.path() / live).c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(::flock(held, LOCK_EX) == 0);

  save_checkpoint(path, Model(1.0f).refs(), sample_state());
  std::vector<std::string> left{live, old_live, other_host, other_file};
  std::sort(left.begin(), left.end());
  CHECK(temp_files(dir.path()) == left);
  ::close(held);  // that writer is gone now too

  // A load cleans up as well (a restarted job reads before it writes). The next writer's
  // own saves already took the temp file whose lock was released.
  std::filesystem::remove(dir.path() / old_live);
  const pid_t victim = kill_a_writer_mid_write(dir.path(), path);
  std::vector<std::string> before_load{
      other_host, other_file, "ckpt.safetensors.tmp." + this_host() + "." + std::to_string(victim)};
  std::sort(before_load.begin(), before_load.end());
  CHECK(temp_files(dir.path()) == before_load);
  load_checkpoint(path);
  std::vector<std::string> after_load{other_host, other_file};
  std::sort(after_load.begin(), after_load.end());
  CHECK(temp_files(dir.path()) == after_load);
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
