// The command line: torchrun's options in both spellings, PET_* defaults, and bad values
// rejected with the value and what was expected.
#include "launcher/config/cli.hpp"

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>

#include "common/error.hpp"
#include "common/version.hpp"
#include "tests/support/temp_dir.hpp"

using namespace ddp::launcher;
using Catch::Matchers::Contains;

namespace {

const Environment kEnv = {{"PATH", "/usr/bin:/bin"}, {"CUDA_VISIBLE_DEVICES", ""}};

LaunchConfig parse(std::vector<std::string> args, Environment env = kEnv) {
  auto command_line = parse_command_line(args, env);
  REQUIRE(command_line.config.has_value());
  return *command_line.config;
}

std::string error_of(std::vector<std::string> args, Environment env = kEnv) {
  try {
    parse_command_line(args, env);
  } catch (const ddp::ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("both spellings of torchrun's options are accepted", "[cli]") {
  auto a = parse({"--nproc_per_node=3", "--max_restarts", "2", "/bin/true"});
  auto b = parse({"--nproc-per-node", "3", "--max-restarts=2", "/bin/true"});
  CHECK(a.nproc_per_node == 3);
  CHECK(b.nproc_per_node == 3);
  CHECK(a.max_restarts == 2);
  CHECK(b.max_restarts == 2);
  CHECK(parse({"--rdzv-id=job7", "/bin/true"}).run_id == "job7");
  CHECK(parse({"--run_id", "job8", "/bin/true"}).run_id == "job8");
}

TEST_CASE("everything after the program goes to the program untouched", "[cli]") {
  auto config = parse({"--nproc_per_node=2", "/bin/echo", "--nproc_per_node=5", "-x", "a"});
  CHECK(config.program == "/bin/echo");
  CHECK(config.program_args == std::vector<std::string>{"--nproc_per_node=5", "-x", "a"});
  CHECK(config.nproc_per_node == 2);
}

TEST_CASE("a -- before the program: everything after it is the program and its arguments",
          "[cli]") {
  auto config = parse({"--nproc_per_node", "2", "--", "/bin/echo", "--lr", "1", "--"});
  CHECK(config.nproc_per_node == 2);
  CHECK(config.program == "/bin/echo");
  CHECK(config.program_args == std::vector<std::string>{"--lr", "1", "--"});
  // After the program, -- is one of its arguments like any other.
  CHECK(parse({"/bin/echo", "--", "x"}).program_args == std::vector<std::string>{"--", "x"});
  CHECK_THAT(error_of({"--nproc_per_node=2", "--"}), Contains("no training program"));
}

TEST_CASE("run_path: a script path for runpy.run_path, also from PET_RUN_PATH", "[cli]") {
  auto script = std::filesystem::temp_directory_path() / "ddp_cli_test_run_path.py";
  std::ofstream(script) << "print('hi')\n";
  Environment env = kEnv;
  env["PYTHON_EXEC"] = "/usr/bin/python3";
  auto config = parse({"--run_path", "--no_python", script.string(), "--lr", "1"}, env);
  CHECK(config.run_path);
  CHECK(config.program == script.string());
  CHECK(config.program_args == std::vector<std::string>{"--lr", "1"});
  env["PET_RUN_PATH"] = "1";
  CHECK(parse({script.string()}, env).run_path);
  std::filesystem::remove(script);
  CHECK_THAT(error_of({"--run_path", script.string()}, env),
             Contains("--run_path: '" + script.string() + "' does not exist"));
}

TEST_CASE("rendezvous fields not given stay unset for the factory's defaults", "[cli]") {
  auto config = parse({"/bin/true"});
  CHECK_FALSE(config.nnodes.has_value());
  CHECK_FALSE(config.master_addr.has_value());
  CHECK_FALSE(config.master_port.has_value());
  CHECK_FALSE(config.node_rank.has_value());
  CHECK_FALSE(config.run_id.has_value());
  auto given = parse({"--nnodes=1:4", "--master_port=0", "/bin/true"});
  CHECK(given.min_nodes == 1);
  CHECK(given.max_nodes == 4);
  CHECK(given.master_port == 0);
}

TEST_CASE("PET_<NAME> sets an option, the flag wins", "[cli]") {
  Environment env = kEnv;
  env["PET_NPROC_PER_NODE"] = "4";
  env["PET_MAX_RESTARTS"] = "3";
  env["PET_STANDALONE"] = "1";
  auto config = parse({"--max_restarts=1", "/bin/true"}, env);
  CHECK(config.nproc_per_node == 4);
  CHECK(config.max_restarts == 1);
  CHECK(config.standalone);
  env["PET_MAX_RESTARTS"] = "many";
  CHECK_THAT(error_of({"/bin/true"}, env), Contains("PET_MAX_RESTARTS=many"));
}

TEST_CASE("hang timeout: --hang_timeout seconds, off by default, PET_HANG_TIMEOUT, bad values",
          "[cli]") {
  CHECK(parse({"/bin/true"}).hang_timeout.count() == 0);
  CHECK(parse({"--hang_timeout=2.5", "/bin/true"}).hang_timeout.count() == 2500);
  Environment env = kEnv;
  env["PET_HANG_TIMEOUT"] = "60";
  CHECK(parse({"/bin/true"}, env).hang_timeout.count() == 60000);
  CHECK_THAT(error_of({"--hang_timeout=-1", "/bin/true"}),
             Contains("--hang_timeout") && Contains("non-negative number of seconds"));
  env["PET_HANG_TIMEOUT"] = "soon";
  CHECK_THAT(error_of({"/bin/true"}, env), Contains("PET_HANG_TIMEOUT=soon"));
}

TEST_CASE("peer tolerance: 15 s by default, --peer_tolerance, DDPLAUNCH_PEER_TOLERANCE, bad values",
          "[cli]") {
  CHECK(parse({"/bin/true"}).peer_tolerance.count() == 15000);
  CHECK(parse({"--peer_tolerance=2.5", "/bin/true"}).peer_tolerance.count() == 2500);
  CHECK(parse({"--peer_tolerance", "1m", "/bin/true"}).peer_tolerance.count() == 60000);
  Environment env = kEnv;
  env["DDPLAUNCH_PEER_TOLERANCE"] = "30";
  CHECK(parse({"/bin/true"}, env).peer_tolerance.count() == 30000);
  CHECK(parse({"--peer_tolerance=6", "/bin/true"}, env).peer_tolerance.count() == 6000);
  CHECK_THAT(error_of({"--peer_tolerance=0.2", "/bin/true"}),
             Contains("--peer_tolerance=0.2") && Contains("from 1 s to 1 day"));
  env["DDPLAUNCH_PEER_TOLERANCE"] = "soon";
  CHECK_THAT(error_of({"/bin/true"}, env), Contains("DDPLAUNCH_PEER_TOLERANCE=soon"));
}

TEST_CASE("in-place recovery: off by default, --recovery_timeout seconds, python programs accepted",
          "[cli][recovery]") {
  CHECK_FALSE(parse({"/bin/true"}).in_place_recovery);
  CHECK(parse({"/bin/true"}).recovery_timeout.count() == 60000);
  const auto config = parse({"--in_place_recovery", "--recovery_timeout=2.5", "/bin/true"});
  CHECK(config.in_place_recovery);
  CHECK(config.recovery_timeout.count() == 2500);
  CHECK_THAT(error_of({"--in_place_recovery", "--recovery_timeout=0", "/bin/true"}),
             Contains("--recovery_timeout") && Contains("positive number of seconds"));
  // PyTorch scripts take part through ddplaunch_recovery.py (docs/recovery.md, "PyTorch"); one
  // that never opens its channel is restarted at a change, as without the flag.
  CHECK(parse({"--in_place_recovery", "-m", "trainer.main"}).in_place_recovery);
}

TEST_CASE("spares: --spare_workers hot by default, cold on request, nothing else accepted",
          "[cli][recovery][spare]") {
  CHECK(parse({"/bin/true"}).hot_spares);
  CHECK(parse({"--in_place_recovery", "--spare_workers", "hot", "/bin/true"}).hot_spares);
  CHECK_FALSE(parse({"--in_place_recovery", "--spare-workers=cold", "/bin/true"}).hot_spares);
  CHECK_THAT(error_of({"--spare_workers=warm", "/bin/true"}),
             Contains("--spare_workers=warm") && Contains("expected hot or cold"));
}

TEST_CASE("standby workers: --standby_workers N with in-place recovery, and what it refuses",
          "[cli][recovery][standby]") {
  CHECK(parse({"/bin/true"}).standby_workers == 0);
  CHECK(parse({"--in_place_recovery", "--standby_workers", "2", "/bin/true"}).standby_workers == 2);
  CHECK(parse({"--in_place_recovery", "--standby-workers=1", "/bin/true"}).standby_workers == 1);
  CHECK_THAT(error_of({"--standby_workers", "1", "/bin/true"}),
             Contains("--standby_workers=1 needs --in_place_recovery"));
  CHECK_THAT(error_of({"--in_place_recovery", "--standby_workers=-1", "/bin/true"}),
             Contains("--standby_workers=-1") && Contains("expected 0 to 64"));
  CHECK_THAT(error_of({"--in_place_recovery", "--standby_workers=65", "/bin/true"}),
             Contains("expected 0 to 64"));
  CHECK_THAT(error_of({"--in_place_recovery", "--standby_workers=x", "/bin/true"}),
             Contains("--standby_workers"));
  CHECK_THAT(
      error_of({"--in_place_recovery", "--standby_workers=1", "--spare_workers=cold", "/bin/true"}),
      Contains("with --spare_workers cold"));
  CHECK_THAT(
      error_of({"--in_place_recovery", "--standby_workers=1", "--virtual_local_rank", "/bin/true"}),
      Contains("with --virtual_local_rank"));
  CHECK_THAT(error_of({"--in_place_recovery", "--standby_workers=1", "--pass_local_rank_arg",
                       "/bin/true"}),
             Contains("with --pass_local_rank_arg"));
}

TEST_CASE("redirects and tee take torchrun's values and per-rank maps", "[cli]") {
  auto config = parse({"-r", "3", "--tee=0:1,1:2", "/bin/true"});
  CHECK(config.redirects.mode_for(5) == 3);
  CHECK(config.tee.mode_for(0) == 1);
  CHECK(config.tee.mode_for(1) == 2);
  CHECK(config.tee.mode_for(2) == 0);
  CHECK_THAT(error_of({"-r", "4", "/bin/true"}), Contains("--redirects=4"));
  CHECK_THAT(error_of({"-t", "0:x", "/bin/true"}), Contains("'0:x'"));
}

TEST_CASE("the legacy --local_rank flag and python programs", "[cli]") {
  CHECK(parse({"--pass_local_rank_arg", "/bin/true"}).pass_local_rank_arg == "local_rank");
  CHECK(parse({"--pass-local-rank-arg=local-rank", "/bin/true"}).pass_local_rank_arg ==
        "local-rank");
  CHECK_THAT(error_of({"--pass_local_rank_arg=rank", "/bin/true"}), Contains("'local_rank'"));
  Environment env = kEnv;
  env["PYTHON_EXEC"] = "/usr/bin/python3";
  auto module = parse({"-m", "json.tool", "x"}, env);
  CHECK(module.module);
  CHECK(module.python_exec == "/usr/bin/python3");
}

TEST_CASE("bad values fail before anything runs, naming the value", "[cli]") {
  CHECK_THAT(error_of({"--nproc_per_node=0", "/bin/true"}), Contains("--nproc_per_node=0"));
  CHECK_THAT(error_of({"--nproc_per_node=two", "/bin/true"}), Contains("'gpu'"));
  CHECK_THAT(error_of({"--master_port=70000", "/bin/true"}), Contains("--master_port=70000"));
  CHECK_THAT(error_of({"--master_port=-1", "/bin/true"}), Contains("0-65535"));
  CHECK_THAT(error_of({"--nnodes=4:2", "/bin/true"}), Contains("MIN 4 is greater than MAX 2"));
  CHECK_THAT(error_of({"--nnodes=0", "/bin/true"}), Contains("--nnodes=0"));
  CHECK_THAT(error_of({"--nnodes=2", "--node_rank=2", "/bin/true"}),
             Contains("--node_rank=2: must be less than --nnodes (2)"));
  CHECK_THAT(error_of({"/no/such/program"}), Contains("'/no/such/program' does not exist"));
  auto plain_file = std::filesystem::temp_directory_path() / "ddp_cli_test_not_executable";
  std::ofstream(plain_file) << "data";
  std::filesystem::permissions(
      plain_file, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  CHECK_THAT(error_of({plain_file.string()}), Contains("not executable"));
  std::filesystem::remove(plain_file);
  CHECK_THAT(error_of({"missing_script.py"}), Contains("'missing_script.py' does not exist"));
  CHECK_THAT(error_of({"--bogus", "/bin/true"}), Contains("--bogus"));
  CHECK_THAT(error_of({"--max_restarts=-1", "/bin/true"}), Contains("--max_restarts=-1"));
  CHECK_THAT(error_of({"--stop_timeout=-3", "/bin/true"}), Contains("--stop_timeout"));
  CHECK_THAT(error_of({"--local_ranks_filter=0,x", "/bin/true"}), Contains("'x'"));
  CHECK_THAT(error_of({"--nproc_per_node=2", "--local_ranks_filter=5", "/bin/true"}),
             Contains("--local_ranks_filter=5: local rank 5 does not exist; valid local ranks "
                      "are 0..1 (--nproc_per_node=2)"));
  CHECK_THAT(error_of({"--nproc_per_node=3", "--local_ranks_filter=0,3", "/bin/true"}),
             Contains("0..2"));
  CHECK(parse({"--nproc_per_node=2", "--local_ranks_filter=1", "/bin/true"}).local_ranks_filter ==
        std::vector<int>{1});
  CHECK_THAT(error_of({}), Contains("no training program"));
}

namespace {
// n GPUs as the probe reports them: bus ids in order, UUIDs GPU-0000-feed, GPU-0001-feed...,
// all on NUMA node 0.
std::vector<GpuInfo> gpu_table(int n) {
  std::vector<GpuInfo> gpus;
  for (int i = 0; i < n; ++i) {
    GpuInfo gpu;
    gpu.bus_id = "0000:" + std::to_string(10 + i) + ":00.0";
    const std::string index = std::to_string(i);
    gpu.uuid = "GPU-" + std::string(4 - index.size(), '0') + index + "-feed";
    gpus.push_back(gpu);
  }
  return gpus;
}
}  // namespace

TEST_CASE("gpu and auto count the GPUs present, narrowed by CUDA_VISIBLE_DEVICES", "[cli]") {
  auto gpus = [](int n) { return GpuProbe([n] { return gpu_table(n); }); };
  auto nproc = [&](const std::string& spec, int present, std::optional<std::string> cvd) {
    Environment env = {{"PATH", "/usr/bin:/bin"}};
    if (cvd) env["CUDA_VISIBLE_DEVICES"] = *cvd;
    auto command_line =
        parse_command_line({"--nproc_per_node=" + spec, "/bin/true"}, env, gpus(present));
    return command_line.config->nproc_per_node;
  };
  CHECK(nproc("gpu", 2, std::nullopt) == 2);
  CHECK(nproc("gpu", 2, "1") == 1);
  CHECK(nproc("gpu", 4, "0,3") == 2);
  CHECK(nproc("auto", 2, "1") == 1);
  CHECK(nproc("auto", 0, "0,1") >= 1);  // no GPU: one per CPU
  CHECK(nproc("cpu", 2, std::nullopt) >= 1);

  // No GPU (this machine): an error naming what was found, whatever CUDA_VISIBLE_DEVICES says.
  Environment env = {{"PATH", "/usr/bin:/bin"}, {"CUDA_VISIBLE_DEVICES", "0,1"}};
  std::string error;
  try {
    parse_command_line({"--nproc_per_node", "gpu", "/bin/true"}, env, gpus(0));
  } catch (const ddp::ConfigError& e) {
    error = e.what();
  }
  CHECK_THAT(error, Contains("--nproc_per_node=gpu: CUDA is not available") &&
                        Contains("CUDA_VISIBLE_DEVICES='0,1' names devices that do not exist"));
  env["CUDA_VISIBLE_DEVICES"] = "";
  CHECK_THROWS_WITH(parse_command_line({"--nproc_per_node=gpu", "/bin/true"}, env, gpus(2)),
                    Contains("2 present, CUDA_VISIBLE_DEVICES='' selects none of them"));
}

TEST_CASE("CUDA_VISIBLE_DEVICES is read as CUDA reads it", "[cli]") {
  auto visible = [](const char* cvd, int present) {
    return visible_gpus(gpu_table(present), {{"CUDA_VISIBLE_DEVICES", cvd}}).size();
  };
  CHECK(visible_gpus(gpu_table(3), {}).size() == 3);  // unset: every GPU present
  CHECK(visible("", 2) == 0);
  CHECK(visible("-1", 2) == 0);
  CHECK(visible("NoDevFiles", 2) == 0);
  CHECK(visible("1", 2) == 1);
  CHECK(visible("1, 0", 2) == 2);
  CHECK(visible("0,1", 0) == 0);    // indices of GPUs that do not exist
  CHECK(visible("0,5,1", 2) == 1);  // an invalid index ends the list
  CHECK(visible("0,0", 2) == 1);
  CHECK(visible("GPU-0000", 1) == 1);  // a UUID, or a unique prefix of one
  CHECK(visible("GPU-8f6e1a2b-0000-0000-0000-000000000000", 1) == 0);  // no such GPU
  CHECK(visible("MIG-5e2c7d1a-0000-0000-0000-000000000000", 1) == 1);
  CHECK(visible("MIG-5e2c7d1a-0000-0000-0000-000000000000", 0) == 0);
}

TEST_CASE("GPUs are counted from device nodes the driver knows, without CUDA", "[cli]") {
  ddp::test::TempDir root;
  CHECK(probe_gpus(root.path()).empty());
  for (const char* node : {"nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", "nvidia2"}) {
    std::filesystem::create_directories(root.path() / "dev");
    root.write(std::string("dev/") + node, "");
  }
  CHECK(probe_gpus(root.path()).empty());  // no driver loaded: nodes alone do not count
  auto gpus = root.path() / "proc/driver/nvidia/gpus";
  std::filesystem::create_directories(gpus / "0000:3b:00.0");
  std::filesystem::create_directories(gpus / "0000:5e:00.0");
  CHECK(probe_gpus(root.path()).size() == 2);
  std::filesystem::create_directories(gpus / "0000:86:00.0");
  std::filesystem::create_directories(gpus / "0000:af:00.0");
  CHECK(probe_gpus(root.path()).size() == 3);  // a GPU without a node is not this container's
}

TEST_CASE("version prints the program name and version and runs nothing", "[cli]") {
  auto command_line = parse_command_line({"--version"}, kEnv);
  CHECK_FALSE(command_line.config.has_value());
  CHECK(command_line.help == std::string("ddplaunch ") + ddp::kVersion + "\n");
  CHECK(std::regex_match(command_line.help, std::regex("ddplaunch [0-9]+\\.[0-9]+\\.[0-9]+\n")));
  CHECK_THAT(parse_command_line({"--help"}, kEnv).help, Contains("--version"));
}

TEST_CASE("version after the program belongs to the program", "[cli]") {
  auto config = parse({"/bin/echo", "--version"});
  CHECK(config.program == "/bin/echo");
  CHECK(config.program_args == std::vector<std::string>{"--version"});
}

TEST_CASE("PET_VERSION and PET_HELP in the environment do not replace the launch", "[cli]") {
  Environment env = kEnv;
  env["PET_VERSION"] = "1";
  env["PET_HELP"] = "1";
  CHECK(parse({"/bin/echo"}, env).program == "/bin/echo");
}

TEST_CASE("help prints the options and runs nothing", "[cli]") {
  auto command_line = parse_command_line({"--help"}, kEnv);
  CHECK_FALSE(command_line.config.has_value());
  CHECK_THAT(command_line.help, Contains("--nproc_per_node"));
  CHECK_THAT(command_line.help, Contains("--stop_timeout"));
  CHECK_THAT(command_line.help, Contains("--run_path"));
  // The usage line names the program; no option name runs into other text.
  CHECK_THAT(command_line.help, Contains("\nUsage: ddplaunch [OPTIONS] PROGRAM [ARGS...]\n"));
  CHECK_THAT(command_line.help,
             Contains("--pass_local_rank_arg,--pass-local-rank-arg[=local_rank]\n"));
  std::regex option_name(R"(--[a-z_-]+)");
  for (auto it =
           std::sregex_iterator(command_line.help.begin(), command_line.help.end(), option_name);
       it != std::sregex_iterator(); ++it) {
    auto end = static_cast<size_t>(it->position() + it->length());
    char next = end < command_line.help.size() ? command_line.help[end] : '\n';
    INFO(it->str() << " is followed by '" << next << "'");
    CHECK(std::string(" ,=[\n.)").find(next) != std::string::npos);
  }
}

TEST_CASE(
    "the console options: log_collapse on, off or a window in ms, progress_bars auto, thin or raw",
    "[cli]") {
  const auto defaults = parse({"/bin/true"});
  CHECK(defaults.log_collapse);
  CHECK_FALSE(defaults.log_collapse_window.has_value());
  CHECK(defaults.progress_bars == "auto");
  CHECK_FALSE(parse({"--log_collapse", "off", "/bin/true"}).log_collapse);
  const auto window = parse({"--log-collapse=2000", "/bin/true"});
  CHECK(window.log_collapse);
  CHECK(window.log_collapse_window == std::chrono::milliseconds(2000));
  CHECK(parse({"--progress_bars", "raw", "/bin/true"}).progress_bars == "raw");
  CHECK(parse({"/bin/true"}, {{"PATH", "/usr/bin:/bin"}, {"PET_PROGRESS_BARS", "thin"}})
            .progress_bars == "thin");
  CHECK(error_of({"--log_collapse", "5", "/bin/true"}) ==
        "--log_collapse=5: expected on, off, or a window in milliseconds from 10 to 60000");
  CHECK(error_of({"--log_collapse", "yes", "/bin/true"}) ==
        "--log_collapse=yes: expected on, off, or a window in milliseconds from 10 to 60000");
  CHECK(error_of({"--progress_bars", "live", "/bin/true"}) ==
        "--progress_bars=live: expected auto, thin or raw");
}
