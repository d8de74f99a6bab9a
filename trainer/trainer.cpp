#include "trainer/trainer.hpp"

#include <unistd.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <thread>

#include "common/error.hpp"
#include "worker_runtime/checkpoint.hpp"
#include "worker_runtime/metrics.hpp"

namespace ddp::trainer {
namespace wr = worker_runtime;

namespace {

std::vector<std::size_t> model_sizes(const TrainOptions& o, const Dataset& train) {
  std::vector<std::size_t> sizes{train.num_features};
  sizes.insert(sizes.end(), o.hidden.begin(), o.hidden.end());
  sizes.push_back(static_cast<std::size_t>(train.num_classes));
  return sizes;
}

double now_seconds() {
  using Clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
}

wr::BucketerOptions bucketer_options(const TrainOptions& o) {
  wr::BucketerOptions b;
  b.bucket_cap_mb = o.bucket_cap_mb;
  return b;
}

wr::SamplerOptions sampler_options(const TrainOptions& o, const Dataset& train, int rank,
                                   int world) {
  wr::SamplerOptions s;
  s.dataset_size = static_cast<int64_t>(train.rows());
  s.rank = rank;
  s.world_size = world;
  s.shuffle = true;
  s.seed = o.seed;
  return s;
}

// Fixed-point with `digits` decimals, or scientific when `scientific`.
std::string fmt(double v, int digits, bool scientific = false) {
  std::ostringstream out;
  out.precision(digits);
  out << (scientific ? std::scientific : std::fixed) << v;
  return out.str();
}

}  // namespace

Trainer::Trainer(const TrainOptions& options, wr::ProcessGroup& group, const WorkerInfo& worker,
                 Split data)
    : options_(options),
      group_(&group),
      context_(worker.context),
      restart_count_(worker.restart_count),
      data_(std::move(data)),
      model_(make_model(worker.use_cuda, worker.local_rank, model_sizes(options, data_.train),
                        options.optimizer)) {
  attach(group);
  const int64_t per_rank = sampler_->num_samples();
  if (per_rank < options_.batch_size) {
    throw ConfigError("--batch_size " + std::to_string(options_.batch_size) + " with " +
                      std::to_string(world_) + " rank(s) and " +
                      std::to_string(data_.train.rows()) + " training rows leaves " +
                      std::to_string(per_rank) + " rows per rank: expected at least one batch");
  }
  const int64_t steps_per_epoch = per_rank / options_.batch_size;
  // The schedule spans --epochs even when --max_steps stops early, so a run cut short (or
  // resumed) follows the same learning rates as the full one. It is built once: after an
  // in-place recovery step_ keeps counting on the same schedule.
  schedule_ = LrSchedule{options_.lr, options_.warmup_steps, steps_per_epoch * options_.epochs,
                         options_.min_lr_ratio};
  model_->init(options_.seed);
  if (!options_.sample_log.empty()) {
    std::filesystem::create_directories(options_.sample_log);
    const auto file = std::filesystem::path(options_.sample_log) /
                      ("samples-" + std::to_string(::getpid()) + ".txt");
    sample_log_.open(file, std::ios::app);
    if (!sample_log_) throw ConfigError("--sample_log: cannot open " + file.string());
  }
}

Trainer::~Trainer() = default;

void Trainer::attach(wr::ProcessGroup& group) {
  bucketer_.reset();  // waits for (failed) in-flight buckets of the old group
  consistency_.reset();
  group_ = &group;
  rank_ = group.rank();
  world_ = group.size();
  bucketer_ = std::make_unique<wr::GradientBucketer>(group, bucketer_options(options_));
  // Backward finishes the last layer first, so it is registered (and bucketed) first.
  for (std::size_t l = model_->layers().size(); l-- > 0;) {
    bucketer_->add_gradient(model_->layer_gradients(l));
  }
  sampler_ = std::make_unique<wr::DistributedSampler>(
      sampler_options(options_, data_.train, rank_, world_));
  consistency_ = std::make_unique<wr::ConsistencyChecker>(group, options_.consistency_every);
  // Rank 0 writes the metrics file; after a recovery that may be another process.
  if (!log_ || rank_ == 0) log_ = std::make_unique<MetricsLog>(rank_ == 0 ? options_.metrics : "");
}

std::string Trainer::checkpoint_path() const {
  return (std::filesystem::path(options_.checkpoint_dir) / "checkpoint.safetensors").string();
}

bool Trainer::resume() {
  if (options_.checkpoint_dir.empty() || !std::filesystem::exists(checkpoint_path())) {
    return false;
  }
  const wr::Checkpoint ckpt = wr::load_checkpoint(checkpoint_path());
  if (ckpt.state.seed != options_.seed) {
    throw CheckpointError(checkpoint_path() + " was written by a run with --seed " +
                          std::to_string(ckpt.state.seed) + ", this run has --seed " +
                          std::to_string(options_.seed) +
                          ": use another --checkpoint_dir or the same seed");
  }
  const auto params = model_->host_parameters();
  for (std::size_t l = 0; l < model_->layers().size(); ++l) {
    const LayerSlot& s = model_->layers()[l];
    const auto out = static_cast<int64_t>(s.out);
    const auto in = static_cast<int64_t>(s.in);
    wr::restore_tensor(ckpt, weight_name(l), {out, in}, params.subspan(s.offset, s.out * s.in));
    wr::restore_tensor(ckpt, bias_name(l), {out}, params.subspan(s.offset + s.out * s.in, s.out));
  }
  for (const StateBuffer& b : model_->host_optimizer_buffers()) {
    wr::restore_tensor(ckpt, b.name, {static_cast<int64_t>(b.data.size())}, b.data);
  }
  model_->load_optimizer_scalar_state(ckpt.state.optimizer);
  model_->push_host_state();
  epoch_ = ckpt.state.epoch;
  samples_seen_ = ckpt.state.extra.value("samples_seen", int64_t{0});
  // Positions are kept as global samples so a resume at another world size continues at the
  // same point of the epoch's permutation (older checkpoints: per-rank position x world).
  global_position_ = ckpt.state.extra.value("global_position",
                                            ckpt.state.position_in_epoch * ckpt.state.world_size);
  // The step as saved: samples_seen / (batch x world) is wrong once the world changed.
  step_ = ckpt.state.global_step;
  // The schedule of the job's first start (a resume at another world size would compute
  // another length), as an in-place recovery keeps it; older checkpoints: this run's.
  schedule_.total_steps = ckpt.state.extra.value("schedule_steps", schedule_.total_steps);
  last_log_samples_ = samples_seen_;
  return true;
}

TrainResult Trainer::run() {
  TrainResult result;
  result.resumed = start();
  if (rank_ == 0) {
    std::cout << "[train] " << world_ << " rank(s), backend " << group_->backend() << ", model "
              << model_->num_parameters() << " parameters, " << data_.train.rows() << " train / "
              << data_.validation.rows() << " validation rows, "
              << sampler_->num_samples() / options_.batch_size << " steps/epoch" << std::endl;
    if (result.resumed) {
      std::cout << "[train] resumed from " << checkpoint_path() << " at epoch " << epoch_
                << " step " << step_ << " (restart " << restart_count_ << ")" << std::endl;
      log_->write(
          {{"kind", "resume"}, {"epoch", epoch_}, {"step", step_}, {"restart", restart_count_}});
    }
  }
  last_log_time_ = now_seconds();
  for (;;) {
    try {
      train_all(result);
      break;
    } catch (const CollectiveError& e) {
      recover_or_rethrow(e);  // then train_all continues from the agreed state
    }
  }
  result.steps = step_;
  return result;
}

bool Trainer::start() {
  // In place, a fresh worker asks the group first: survivors' state wins over the checkpoint
  // (when nobody is live, e.g. the job's first start, every rank loads the checkpoint).
  if (in_place()) {
    try {
      sync_state(/*announce=*/false);
    } catch (const CollectiveError& e) {
      recover_or_rethrow(e);
    }
    if (live_) return true;
  }
  const bool resumed = resume();
  live_ = true;
  // Identical init from the seed, or the same checkpoint: verify before spending any compute.
  consistency_->check(step_, {model_->host_parameters()});
  return resumed;
}

void Trainer::train_all(TrainResult& result) {
  bool have_eval = false;
  for (; epoch_ < options_.epochs; ++epoch_, global_position_ = 0) {
    if (!train_epoch()) break;
    result.validation = evaluate(epoch_);
    have_eval = true;
    if (!options_.checkpoint_dir.empty()) save_checkpoint(checkpoint_path(), epoch_ + 1, 0, true);
  }
  if (!have_eval) result.validation = evaluate(epoch_);
  if (!options_.out.empty()) save_checkpoint(options_.out, epoch_, 0, /*with_state=*/false);
}

bool Trainer::train_epoch() {
  sampler_->set_epoch(epoch_);
  sampler_->set_global_start(global_position_);
  const std::vector<int64_t> indices = sampler_->indices();
  const auto batch = static_cast<std::size_t>(options_.batch_size);
  const auto end = static_cast<std::size_t>(sampler_->num_samples());
  for (std::size_t off = 0; off + batch <= end; off += batch) {
    if (options_.max_steps > 0 && step_ >= options_.max_steps) return false;
    if (auto* progress = group_->progress()) progress->step(step_ + 1);  // the step it works on
    const auto taken = std::span<const int64_t>(indices).subspan(off, batch);
    train_step(taken);
    global_position_ = sampler_->global_position(static_cast<int64_t>(off + batch));
    log_samples(taken);
    report_first_step();
    if (step_ % options_.log_every == 0) log_progress();
    if (options_.consistency_every > 0 && step_ % options_.consistency_every == 0) {
      consistency_->check(step_, {model_->host_parameters()});  // a device copy on a GPU
    }
    if (!options_.checkpoint_dir.empty() && options_.checkpoint_every > 0 &&
        step_ % options_.checkpoint_every == 0) {
      save_checkpoint(checkpoint_path(), epoch_, global_position_, true);
    }
    maybe_inject_fault();
  }
  return !(options_.max_steps > 0 && step_ >= options_.max_steps);
}

void Trainer::train_step(std::span<const int64_t> indices) {
  const std::size_t f = data_.train.num_features;
  batch_x_.resize(indices.size() * f);
  batch_y_.resize(indices.size());
  for (std::size_t i = 0; i < indices.size(); ++i) {
    const auto row = static_cast<std::size_t>(indices[i]);
    const auto src = data_.train.row(row);
    std::copy(src.begin(), src.end(), batch_x_.begin() + static_cast<std::ptrdiff_t>(i * f));
    batch_y_[i] = data_.train.labels[row];
  }
  const std::size_t last = model_->layers().size() - 1;
  const BatchResult r = model_->train_batch(
      batch_x_, batch_y_, [this, last](std::size_t layer) { bucketer_->mark_ready(last - layer); });
  const double wait_start = now_seconds();
  bucketer_->wait();  // gradients now averaged over ranks
  wait_seconds_ += now_seconds() - wait_start;
  lr_ = schedule_.at(step_);
  model_->step(lr_);
  ++step_;
  samples_seen_ += static_cast<int64_t>(indices.size()) * world_;
  loss_sum_ += r.loss_sum;
  correct_ += r.correct;
  count_ += r.count;
}

void Trainer::log_progress() {
  wr::MetricAccumulator acc;
  acc.add("loss", loss_sum_, static_cast<double>(count_));
  acc.add("accuracy", static_cast<double>(correct_), static_cast<double>(count_));
  const auto global = acc.reduce(*group_);
  loss_sum_ = 0;
  correct_ = 0;
  count_ = 0;
  const double now = now_seconds();
  const double rate =
      static_cast<double>(samples_seen_ - last_log_samples_) / std::max(1e-9, now - last_log_time_);
  const double steps_in_interval = static_cast<double>(samples_seen_ - last_log_samples_) /
                                   static_cast<double>(options_.batch_size * world_);
  const double wait_ms = 1e3 * wait_seconds_ / std::max(1.0, steps_in_interval);
  wait_seconds_ = 0;
  last_log_time_ = now;
  last_log_samples_ = samples_seen_;
  if (rank_ != 0) return;
  const double loss = global.at("loss").mean();
  const double accuracy = global.at("accuracy").mean();
  std::cout << "[train] epoch " << epoch_ << " step " << step_ << " loss " << fmt(loss, 4)
            << " acc " << fmt(accuracy, 4) << " lr " << fmt(lr_, 3, true) << " samples/s "
            << fmt(rate, 0) << " allreduce_wait_ms " << fmt(wait_ms, 3) << std::endl;
  log_->write({{"kind", "train"},
               {"epoch", epoch_},
               {"step", step_},
               {"loss", loss},
               {"accuracy", accuracy},
               {"lr", lr_},
               {"samples_per_s", rate},
               {"samples_seen", samples_seen_}});
}

EvalResult Trainer::evaluate(int64_t epoch) {
  // Rank r scores validation rows r, r + world, ...: every row exactly once over all ranks.
  const Dataset& val = data_.validation;
  std::vector<int64_t> mine;
  for (auto i = static_cast<std::size_t>(rank_); i < val.rows();
       i += static_cast<std::size_t>(world_)) {
    mine.push_back(static_cast<int64_t>(i));
  }
  constexpr std::size_t kChunk = 1024;
  BatchResult local;
  const std::size_t f = val.num_features;
  for (std::size_t off = 0; off < mine.size(); off += kChunk) {
    const std::size_t n = std::min(kChunk, mine.size() - off);
    batch_x_.resize(n * f);
    batch_y_.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
      const auto row = static_cast<std::size_t>(mine[off + i]);
      std::copy_n(val.row(row).data(), f, batch_x_.data() + i * f);
      batch_y_[i] = val.labels[row];
    }
    const BatchResult r = model_->evaluate(batch_x_, batch_y_);
    local.loss_sum += r.loss_sum;
    local.correct += r.correct;
    local.count += r.count;
  }
  wr::MetricAccumulator acc;
  acc.add("loss", local.loss_sum, static_cast<double>(local.count));
  acc.add("accuracy", static_cast<double>(local.correct), static_cast<double>(local.count));
  const auto global = acc.reduce(*group_);
  EvalResult result{global.at("accuracy").mean(), global.at("loss").mean(),
                    static_cast<int64_t>(global.at("accuracy").count)};
  // Every rank prints: the reduced numbers are the same everywhere, which is the point.
  std::cout << "[val] rank " << rank_ << " epoch " << epoch << " step " << step_ << " accuracy "
            << fmt(result.accuracy, 4) << " loss " << fmt(result.loss, 4) << " (" << result.count
            << " samples)" << std::endl;
  if (rank_ == 0) {
    log_->write({{"kind", "val"},
                 {"epoch", epoch},
                 {"step", step_},
                 {"loss", result.loss},
                 {"accuracy", result.accuracy},
                 {"count", result.count}});
  }
  return result;
}

void Trainer::save_checkpoint(const std::string& path, int64_t epoch, int64_t global_position,
                              bool with_state) {
  std::vector<wr::TensorRef> tensors;
  const auto params = std::span<const float>(model_->host_parameters());
  for (std::size_t l = 0; l < model_->layers().size(); ++l) {
    const LayerSlot& s = model_->layers()[l];
    const auto out = static_cast<int64_t>(s.out);
    const auto in = static_cast<int64_t>(s.in);
    tensors.push_back({weight_name(l), {out, in}, params.subspan(s.offset, s.out * s.in)});
    tensors.push_back({bias_name(l), {out}, params.subspan(s.offset + s.out * s.in, s.out)});
  }
  wr::TrainingState state;
  state.epoch = epoch;
  // Per-rank position for older readers; global_position is what a resume uses.
  state.position_in_epoch = global_position / world_;
  state.global_step = step_;
  state.world_size = world_;
  state.seed = options_.seed;
  state.extra = {{"samples_seen", samples_seen_}, {"global_position", global_position}};
  std::vector<std::size_t> sizes{model_->layers().front().in};
  for (const LayerSlot& slot : model_->layers()) sizes.push_back(slot.out);
  state.extra["layer_sizes"] = sizes;
  state.extra["schedule_steps"] = schedule_.total_steps;
  if (with_state) {
    for (const StateBuffer& b : model_->host_optimizer_buffers()) {
      tensors.push_back({b.name, {static_cast<int64_t>(b.data.size())}, b.data});
    }
    state.optimizer = model_->optimizer_scalar_state();
  }
  if (rank_ == 0) {
    std::error_code ignored;  // a parent that already exists is fine; save reports real errors
    const auto parent = std::filesystem::path(path).parent_path();
    if (!parent.empty()) std::filesystem::create_directories(parent, ignored);
  }
  wr::save_checkpoint_on_rank0(*group_, path, tensors, state);
}

void Trainer::maybe_inject_fault() const {
  if (options_.fault_slow_step_ms > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(options_.fault_slow_step_ms));
  }
  if (restart_count_ != 0) return;
  const int victim = options_.fault_rank < 0 ? world_ - 1 : options_.fault_rank;
  if (rank_ != victim) return;
  if (options_.fault_hang_at_step > 0 && step_ == options_.fault_hang_at_step) {
    std::cout << "[train] rank " << rank_ << ": --fault_hang_at_step " << step_
              << " reached, sleeping without progress" << std::endl;
    if (auto* progress = group_->progress()) progress->step(step_ + 1);
    while (true) ::pause();  // the others wait in the next all-reduce; the agent must act
  }
  if (options_.fault_kill_at_step > 0 && step_ == options_.fault_kill_at_step) {
    std::cout << "[train] rank " << rank_ << ": --fault_kill_at_step " << step_
              << " reached, sending myself SIGKILL" << std::endl;
    std::raise(SIGKILL);
  }
  if (options_.fault_kill_node_at_step > 0 && step_ == options_.fault_kill_node_at_step) {
    std::cout << "[train] rank " << rank_ << ": --fault_kill_node_at_step " << step_
              << " reached, SIGKILL to the agent (pid " << ::getppid() << ") and myself"
              << std::endl;
    ::kill(::getppid(), SIGKILL);  // the whole node is lost: its agent first, then us
    std::raise(SIGKILL);
  }
}

void Trainer::log_samples(std::span<const int64_t> indices) {
  if (!sample_log_.is_open()) return;
  const int64_t round = context_ != nullptr ? context_->round() : 0;
  sample_log_ << "round=" << round << " epoch=" << epoch_ << " step=" << step_ << " rank=" << rank_
              << " idx=";
  for (std::size_t i = 0; i < indices.size(); ++i) {
    sample_log_ << (i == 0 ? "" : ",") << indices[i];
  }
  sample_log_ << '\n' << std::flush;  // a SIGKILL must not lose completed steps
}

}  // namespace ddp::trainer
