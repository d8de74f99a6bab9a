// torchrun 2.x (the venv of torch2_reference.hpp, 2.15 by default) beside ddplaunch: the same
// command lines, for one node, two static nodes and two elastic agents, with a worker that
// dumps its environment; every rank's environment must be the same under both launchers but
// for the differences listed below, each with its reason. And docs/cli.md's table of torchrun
// options is checked against the real `torchrun --help`.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "tests/launcher/torch2_reference.hpp"
#include "tests/support/files.hpp"
#include "tests/support/process.hpp"
#include "tests/support/temp_dir.hpp"

using namespace ddp::test;
using namespace std::chrono_literals;

namespace {

using Env = std::map<std::string, std::string>;
using Value = std::optional<std::string>;

constexpr auto kRunTimeout = 240s;
const std::string kDdplaunchPath = build_path("ddplaunch");
const std::string kEnvDump = source_path("tests/launcher/workers/env_dump.py");

enum class Launcher { kTorchrun, kDdplaunch };

const char* name_of(Launcher launcher) {
  return launcher == Launcher::kTorchrun ? "torchrun" : "ddplaunch";
}

int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
            ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  ::close(fd);
  REQUIRE(ok);
  return ntohs(addr.sin_port);
}

// What socket.getfqdn() says here: torchrun's MASTER_ADDR when its c10d rendezvous picks
// the address of the node that hosts the workers' store.
std::string python_fqdn() {
  auto result =
      run_process({torch2_python(), "-c", "import socket; print(socket.getfqdn(), end='')"}, 60s);
  REQUIRE(result.exit_code == 0);
  return result.output;
}

// Starts one agent per entry of agent_args (all at once, as on separate nodes), each running
// env_dump.py; waits for all to exit 0 and returns the environment of ranks 0..world_size-1.
std::map<int, Env> run_job(Launcher launcher,
                           const std::vector<std::vector<std::string>>& agent_args,
                           int world_size) {
  TempDir dir;
  std::vector<std::unique_ptr<ChildProcess>> agents;
  for (const auto& args : agent_args) {
    ChildOptions options;
    options.argv = {launcher == Launcher::kTorchrun ? torch2_torchrun() : kDdplaunchPath};
    options.argv.insert(options.argv.end(), args.begin(), args.end());
    options.argv.push_back(kEnvDump);
    // PYTHON_EXEC for both: ddplaunch runs the venv's python with it, torchrun (which runs
    // its own interpreter) ignores it, and the workers' environments stay comparable.
    options.env = {{"ENV_DUMP_DIR", dir.path().string()}, {"PYTHON_EXEC", torch2_python()}};
    options.merge_stderr = true;
    agents.push_back(std::make_unique<ChildProcess>(options));
  }
  for (auto& agent : agents) {
    int status = agent->wait(kRunTimeout);
    INFO(name_of(launcher) << " agent's output:\n" << agent->out());
    REQUIRE(status == 0);
  }
  std::map<int, Env> by_rank;
  for (int rank = 0; rank < world_size; ++rank) {
    auto path = dir.path() / ("env_" + std::to_string(rank) + ".json");
    auto text = read_file(path);
    INFO(name_of(launcher) << ": " << path);
    REQUIRE_FALSE(text.empty());
    by_rank[rank] = nlohmann::json::parse(text).get<Env>();
  }
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    INFO(name_of(launcher) << " left " << entry.path() << " (more ranks than expected?)");
    CHECK(entry.path().filename().string().starts_with("env_"));
  }
  CHECK(static_cast<int>(std::distance(std::filesystem::directory_iterator(dir.path()),
                                       std::filesystem::directory_iterator())) == world_size);
  return by_rank;
}

// A variable whose value (or presence) legitimately differs between the launchers; holds()
// says what each must give instead (torchrun_env / ddplaunch_env: the whole rank's env).
struct Difference {
  std::string name;  // a variable, or a prefix ending in '*'
  std::string reason;
  std::function<bool(const Value& torchrun, const Value& ddplaunch, const Env& torchrun_env)> holds;

  [[nodiscard]] bool covers(const std::string& variable) const {
    if (name.ends_with('*')) return variable.starts_with(name.substr(0, name.size() - 1));
    return variable == name;
  }
};

bool is_port(const Value& value) {
  return value && !value->empty() && value->size() <= 5 &&
         std::all_of(value->begin(), value->end(), [](char c) { return c >= '0' && c <= '9'; }) &&
         std::stoi(*value) > 0 && std::stoi(*value) <= 65535;
}

// The differences every scenario has.
std::vector<Difference> common_differences() {
  return {
      {"ENV_DUMP_DIR", "this test's own: where each run's workers write their environment",
       [](const Value& t, const Value& d, const Env&) { return t && d; }},
      {"TORCHELASTIC_ERROR_FILE",
       "each launcher's own temporary log tree (torchrun: /tmp/torchelastic_*/<run_id>_*, "
       "ddplaunch: $TMPDIR/ddplaunch_*); the layout below it is the same",
       [](const Value& t, const Value& d, const Env& env) {
         auto tail = "/attempt_" + env.at("TORCHELASTIC_RESTART_COUNT") + "/" +
                     env.at("LOCAL_RANK") + "/error.json";
         return t && d && t->ends_with(tail) && d->ends_with(tail);
       }},
      {"DDPLAUNCH_*",
       "ddplaunch's own additions (DDPLAUNCH_SECRET: the job secret native workers prove to the "
       "store), docs/env.md",
       [](const Value& t, const Value& d, const Env&) { return !t && d; }},
      {"PYTHONFAULTHANDLER",
       "ddplaunch sets 1 when unset so a Python worker that dies of a signal (or hang "
       "detection's SIGABRT) prints its threads' tracebacks (docs/hangs.md); torchrun does not",
       [](const Value& t, const Value& d, const Env&) { return !t && d == "1"; }},
      {"TORCHELASTIC_SIGNALS_TO_HANDLE",
       "ddplaunch's default --signals_to_handle adds SIGUSR1,SIGUSR2 to torchrun's "
       "(docs/cli.md, 'Signals, nohup and orphans')",
       [](const Value& t, const Value& d, const Env&) {
         return t == "SIGTERM,SIGINT,SIGHUP,SIGQUIT" && d == *t + ",SIGUSR1,SIGUSR2";
       }},
  };
}

// Every rank must have received the same names and values from both launchers, but for
// the listed differences, which must each hold as described.
void compare(const std::map<int, Env>& torchrun, const std::map<int, Env>& ddplaunch,
             const std::vector<Difference>& differences) {
  REQUIRE(torchrun.size() == ddplaunch.size());
  for (const auto& [rank, torchrun_env] : torchrun) {
    const auto& ddplaunch_env = ddplaunch.at(rank);
    std::set<std::string> names;
    for (const auto& [name, value] : torchrun_env) names.insert(name);
    for (const auto& [name, value] : ddplaunch_env) names.insert(name);
    for (const auto& name : names) {
      auto lookup = [&](const Env& env) -> Value {
        auto it = env.find(name);
        return it == env.end() ? Value{} : Value{it->second};
      };
      Value t = lookup(torchrun_env);
      Value d = lookup(ddplaunch_env);
      INFO("rank " << rank << ": " << name << ": torchrun " << (t ? "'" + *t + "'" : "(unset)")
                   << ", ddplaunch " << (d ? "'" + *d + "'" : "(unset)"));
      auto difference = std::find_if(differences.begin(), differences.end(),
                                     [&](const Difference& diff) { return diff.covers(name); });
      if (difference != differences.end()) {
        INFO("a listed difference: " << difference->reason);
        CHECK(difference->holds(t, d, torchrun_env));
      } else {
        CHECK(t == d);
      }
    }
    // Not vacuous: torchrun gave every rank the whole contract, and this is that rank.
    for (const char* name :
         {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
          "ROLE_NAME", "ROLE_RANK", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
          "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID",
          "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_ERROR_FILE",
          "TORCH_NCCL_ASYNC_ERROR_HANDLING", "OMP_NUM_THREADS"}) {
      INFO("rank " << rank << ": torchrun did not set " << name);
      CHECK(torchrun_env.count(name) == 1);
    }
    CHECK(torchrun_env.at("RANK") == std::to_string(rank));
  }
}

void require_reference() {
  auto missing = torch2_missing();
  if (!missing.empty()) FAIL(missing);
}

}  // namespace

TEST_CASE("one node: torchrun 2.x and ddplaunch give every worker the same environment",
          "[pytorch][torchrun2]") {
  require_reference();
  // The plain one-node command line: both run it as --standalone (a free port and a random
  // run id per run, torchrun 2.15's default that ddplaunch follows).
  const std::vector<std::string> args = {"--nproc_per_node", "2"};
  auto torchrun = run_job(Launcher::kTorchrun, {args}, 2);
  auto ddplaunch = run_job(Launcher::kDdplaunch, {args}, 2);
  auto differences = common_differences();
  const std::string fqdn = python_fqdn();
  differences.push_back(
      {"MASTER_ADDR",
       "torchrun 2.x names this host as socket.getfqdn() gives it; ddplaunch's one-node store "
       "listens on loopback only and hands out that address (docs/security.md)",
       [fqdn](const Value& t, const Value& d, const Env&) {
         return t == fqdn && d == "127.0.0.1";
       }});
  differences.push_back(
      {"MASTER_PORT", "one node: a free port, picked per run",
       [](const Value& t, const Value& d, const Env&) { return is_port(t) && is_port(d); }});
  differences.push_back(
      {"TORCHELASTIC_RUN_ID",
       "one node: a random run id per run (torchrun: a uuid4, ddplaunch: 16 hex digits)",
       [](const Value& t, const Value& d, const Env&) {
         return t && t->size() == 36 && (*t)[8] == '-' && d && d->size() == 16 &&
                d->find_first_not_of("0123456789abcdef") == std::string::npos;
       }});
  compare(torchrun, ddplaunch, differences);
}

TEST_CASE("two static nodes: torchrun 2.x and ddplaunch give every worker the same environment",
          "[pytorch][torchrun2]") {
  require_reference();
  // One port for both runs, one after the other, so MASTER_PORT is compared too.
  const std::string port = std::to_string(free_port());
  std::vector<std::vector<std::string>> agents;
  for (int node = 0; node < 2; ++node) {
    agents.push_back({"--nnodes", "2", "--node_rank", std::to_string(node), "--master_addr",
                      "127.0.0.1", "--master_port", port, "--nproc_per_node", "2"});
  }
  auto torchrun = run_job(Launcher::kTorchrun, agents, 4);
  auto ddplaunch = run_job(Launcher::kDdplaunch, agents, 4);
  compare(torchrun, ddplaunch, common_differences());
}

TEST_CASE("elastic, two agents: torchrun 2.x and ddplaunch give every worker the same environment",
          "[pytorch][torchrun2]") {
  require_reference();
  const std::string endpoint = "127.0.0.1:" + std::to_string(free_port());
  const std::vector<std::string> args = {"--nnodes",        "1:2",    "--rdzv_backend",   "c10d",
                                         "--rdzv_endpoint", endpoint, "--nproc_per_node", "2"};
  auto torchrun = run_job(Launcher::kTorchrun, {args, args}, 4);
  auto ddplaunch = run_job(Launcher::kDdplaunch, {args, args}, 4);
  auto differences = common_differences();
  const std::string fqdn = python_fqdn();
  differences.push_back(
      {"MASTER_ADDR",
       "torchrun 2.x's c10d rendezvous publishes the first node's socket.getfqdn() "
       "(or --local_addr); ddplaunch hands out the address the agents dialled",
       [fqdn](const Value& t, const Value& d, const Env&) {
         return t == fqdn && d == "127.0.0.1";
       }});
  differences.push_back(
      {"MASTER_PORT",
       "torchrun 2.x starts the workers' store on a free port of the first node; ddplaunch's "
       "workers use the rendezvous store",
       [](const Value& t, const Value& d, const Env&) { return is_port(t) && is_port(d); }});
  compare(torchrun, ddplaunch, differences);
}

namespace {

std::string normalized(std::string option) {
  std::replace(option.begin(), option.end(), '_', '-');
  return option;
}

// The option strings at the start of help lines ("  -r REDIRECTS, --redirects REDIRECTS",
// "  -m,--module ..."): one set of aliases per line, normalized to '-'.
std::vector<std::set<std::string>> options_in_help(const std::string& help) {
  static const std::regex kSpec(R"(^  ? ?(-[^ ].*?)(?:\s{2,}|$))");
  static const std::regex kOption(R"((?:^|[ ,])(--?[A-Za-z][A-Za-z0-9_-]*))");
  std::vector<std::set<std::string>> groups;
  std::istringstream in(help);
  for (std::string line; std::getline(in, line);) {
    std::smatch spec;
    if (!std::regex_search(line, spec, kSpec)) continue;
    std::set<std::string> aliases;
    std::string text = spec[1];
    for (std::sregex_iterator it(text.begin(), text.end(), kOption), end; it != end; ++it) {
      aliases.insert(normalized((*it)[1]));
    }
    if (!aliases.empty()) groups.push_back(aliases);
  }
  return groups;
}

// The cells of a Markdown table row, split on '|' that is not escaped as '\|'.
std::vector<std::string> cells(const std::string& row) {
  std::vector<std::string> result;
  std::string cell;
  for (size_t i = 1; i < row.size(); ++i) {
    if (row[i] == '|' && row[i - 1] != '\\') {
      result.push_back(cell);
      cell.clear();
    } else {
      cell += row[i];
    }
  }
  for (auto& c : result) {
    c.erase(0, c.find_first_not_of(' '));
    c.erase(c.find_last_not_of(' ') + 1);
  }
  return result;
}

struct DocRow {
  std::set<std::string> options;  // from the first column's `code` spans, normalized
  std::string ddplaunch;          // second column
  std::string difference;         // third column
  std::string text;
};

// The rows of docs/cli.md's "torchrun 2.x options, one by one" table.
std::vector<DocRow> torchrun_table(const std::string& doc) {
  auto start = doc.find("\n## torchrun 2.x options, one by one");
  REQUIRE(start != std::string::npos);
  auto end = doc.find("\n## ", start + 1);
  std::istringstream in(doc.substr(start, end == std::string::npos ? end : end - start));
  static const std::regex kCode("`([^`]*)`");
  static const std::regex kOption(R"((?:^|[ ,])(--?[A-Za-z][A-Za-z0-9_-]*))");
  std::vector<DocRow> rows;
  for (std::string line; std::getline(in, line);) {
    if (!line.starts_with("| ") || line.starts_with("| ---")) continue;
    auto columns = cells(line);
    if (columns.size() != 3) continue;
    DocRow row{{}, columns[1], columns[2], line};
    for (std::sregex_iterator it(columns[0].begin(), columns[0].end(), kCode), stop; it != stop;
         ++it) {
      std::string code = (*it)[1];
      for (std::sregex_iterator opt(code.begin(), code.end(), kOption), none; opt != none; ++opt) {
        row.options.insert(normalized((*opt)[1]));
      }
    }
    rows.push_back(row);
  }
  return rows;
}

bool refused(const DocRow& row) {
  std::string text = row.ddplaunch;
  std::transform(text.begin(), text.end(), text.begin(), ::tolower);
  return text.find("refused") != std::string::npos ||
         text.find("not supported") != std::string::npos;
}

}  // namespace

TEST_CASE("docs/cli.md's torchrun table covers every option of the real torchrun --help",
          "[pytorch][torchrun2]") {
  require_reference();
  auto help = run_process({torch2_torchrun(), "--help"}, 120s);
  auto torchrun_options = options_in_help(help.output);
  {
    INFO(help.output);
    REQUIRE(help.exit_code == 0);
    // Not vacuous: argparse's layout was read (training_script is positional, not listed).
    REQUIRE(torchrun_options.size() >= 25);
  }

  auto ddplaunch_help = run_process({kDdplaunchPath, "--help"}, 60s);
  REQUIRE(ddplaunch_help.exit_code == 0);
  std::set<std::string> ddplaunch_options;
  for (const auto& group : options_in_help(ddplaunch_help.output)) {
    ddplaunch_options.insert(group.begin(), group.end());
  }
  REQUIRE(ddplaunch_options.count("--nproc-per-node") == 1);

  auto rows = torchrun_table(read_file(source_path("docs/cli.md")));
  REQUIRE(rows.size() >= 20);
  for (const auto& aliases : torchrun_options) {
    std::string shown;
    for (const auto& alias : aliases) shown += alias + " ";
    INFO("torchrun option " << shown);
    auto row = std::find_if(rows.begin(), rows.end(), [&](const DocRow& r) {
      return std::any_of(aliases.begin(), aliases.end(),
                         [&](const std::string& a) { return r.options.count(a) == 1; });
    });
    REQUIRE(row != rows.end());  // every torchrun option has its row
    INFO("docs/cli.md row: " << row->text);
    if (refused(*row)) {
      CHECK_FALSE(row->difference.empty());  // a refusal says why
      // ...and ddplaunch does refuse it, before running anything: exit 2.
      auto run = run_process({kDdplaunchPath, *aliases.rbegin(), "bash", "/bin/true"}, 60s);
      INFO(run.output);
      CHECK(run.exit_code == 2);
    } else {
      // A supported option is one ddplaunch's --help lists, in one spelling or the other.
      CHECK(std::any_of(aliases.begin(), aliases.end(),
                        [&](const std::string& a) { return ddplaunch_options.count(a) == 1; }));
    }
  }
}
