#include "pipeline/node_share.h"

#include <cstdint>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "core/thread_pool.h"
#include "pipeline/pipeline.h"

namespace stoker {

namespace {

// Leading positive integer of `s` ("4", "4(x2)" as SLURM writes repeated counts), else 0.
int LeadingPositiveInt(const char* s) {
  char* end = nullptr;
  errno = 0;
  long v = std::strtol(s, &end, 10);
  if (end == s || errno != 0 || v < 1 || v > 1000000) return 0;
  if (*end != '\0' && *end != '(') return 0;
  return static_cast<int>(v);
}

// Field 22 of /proc/<pid>/stat: the process start time in clock ticks since boot; 0 when
// the process is not there. (With PID reuse, a new process has another start time.)
uint64_t ProcessStartTime(long pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!std::getline(f, text)) return 0;
  size_t close = text.rfind(')');  // the command name may hold spaces and parentheses
  if (close == std::string::npos) return 0;
  std::istringstream rest(text.substr(close + 1));
  std::string field;
  // After ")" come fields 3 (state) ... 22 (starttime).
  for (int i = 3; i <= 22; ++i)
    if (!(rest >> field)) return 0;
  return std::strtoull(field.c_str(), nullptr, 10);
}

bool MakeDirs(const std::string& path) {
  std::string cur;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    cur = path.substr(0, pos);
    if (cur.empty()) continue;
    if (::mkdir(cur.c_str(), 0700) != 0 && errno != EEXIST) return false;
  }
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::atomic<uint64_t> g_entry_seq{0};

std::string GB(int64_t bytes) { return fmt::format("{:.1f} GB", bytes / 1e9); }

}  // namespace

Result<NodeShare> NodeShareFromEnv(const GetEnvFn& getenv) {
  struct Var {
    const char* size;
    const char* local_rank;
  };
  const Var vars[] = {{"LOCAL_WORLD_SIZE", "LOCAL_RANK"},
                      {"OMPI_COMM_WORLD_LOCAL_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
                      {"SLURM_NTASKS_PER_NODE", "SLURM_LOCALID"},
                      {"MPI_LOCALNRANKS", "MPI_LOCALRANKID"}};
  NodeShare share;
  share.ranks = 0;
  for (const auto& v : vars) {
    const char* s = getenv(v.size);
    if (!s || !*s) continue;
    int n = LeadingPositiveInt(s);
    if (n < 1) return InvalidArgument("{}={} is not a positive integer", v.size, s);
    share.ranks = n;
    share.source = fmt::format("{}={}", v.size, s);
    if (const char* r = getenv(v.local_rank); r && *r) {
      char* end = nullptr;
      long lr = std::strtol(r, &end, 10);
      if (*end == '\0' && lr >= 0 && lr < n) share.local_rank = static_cast<int>(lr);
    }
    return share;
  }
  return share;
}

// ---------------------------------------------------------------------------------------

std::string PipelineRegistry::DefaultDir() {
  if (const char* d = std::getenv("STOKER_PIPELINE_REGISTRY"); d && *d)
    return std::string(d) == "off" ? "" : std::string(d);
  std::string user = "stoker-" + std::to_string(::getuid());
  struct stat st;
  if (::stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) && ::access("/dev/shm", W_OK) == 0)
    return "/dev/shm/" + user + "/pipelines";
  return "/tmp/" + user + "/pipelines";
}

PipelineRegistry::Entry::~Entry() { ::unlink(path_.c_str()); }

Result<std::unique_ptr<PipelineRegistry::Entry>> PipelineRegistry::Register() {
  if (!MakeDirs(dir_)) return IOError("cannot create the pipeline registry {}: {}", dir_, std::strerror(errno));
  long pid = static_cast<long>(::getpid());
  std::string path = fmt::format("{}/{}-{}-{}", dir_, pid, ProcessStartTime(pid), g_entry_seq++);
  int fd = ::open(path.c_str(), O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return IOError("cannot write {}: {}", path, std::strerror(errno));
  ::close(fd);
  return std::make_unique<Entry>(path);
}

int PipelineRegistry::CountAlive() const {
  DIR* d = ::opendir(dir_.c_str());
  if (!d) return 0;
  std::set<long> alive;
  while (dirent* e = ::readdir(d)) {
    long pid = 0;
    unsigned long long start = 0, seq = 0;
    if (std::sscanf(e->d_name, "%ld-%llu-%llu", &pid, &start, &seq) != 3 || pid <= 0) continue;
    // With /proc, the start time must match (the same id may be a new process now);
    // without it, the id being alive is all there is to go on.
    uint64_t now_start = ProcessStartTime(pid);
    bool live = now_start != 0
                    ? (start == 0 || now_start == start)
                    : start == 0 && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM);
    if (live) {
      alive.insert(pid);
    } else {
      ::unlink((dir_ + "/" + e->d_name).c_str());  // left behind by a crash
    }
  }
  ::closedir(d);
  return static_cast<int>(alive.size());
}

// ---------------------------------------------------------------------------------------

Budgets SplitBudgets(int cpu_budget, int64_t memory_budget, int node_cpus, int64_t node_memory,
                     int64_t min_memory, const NodeShare& share) {
  Budgets b;
  const int n = std::max(1, share.ranks);
  node_cpus = std::max(1, node_cpus);
  if (cpu_budget > 0) {
    b.cpus = cpu_budget;
  } else if (n > 1) {
    if (share.local_rank >= 0) {  // the remainder goes to the first local ranks
      b.cpus = node_cpus / n + (share.local_rank < node_cpus % n ? 1 : 0);
    } else {
      b.cpus = (node_cpus + n / 2) / n;
    }
    b.cpus = std::max(1, b.cpus);
    b.shared = true;
  } else {
    b.cpus = node_cpus;
  }
  if (memory_budget > 0) {
    b.memory = memory_budget;
  } else {
    b.memory = std::max<int64_t>(node_memory / n, min_memory);
    b.shared = b.shared || n > 1;
  }
  std::vector<std::string> parts;
  if (cpu_budget > 0) {
    parts.push_back(fmt::format("cpu budget {} (options)", b.cpus));
  } else if (n > 1) {
    parts.push_back(fmt::format("cpu budget {} of {} cores", b.cpus, node_cpus));
  } else {
    parts.push_back(fmt::format("cpu budget {} (all cores)", b.cpus));
  }
  if (memory_budget > 0) {
    parts.push_back(fmt::format("memory budget {} (options)", GB(b.memory)));
  } else if (n > 1) {
    parts.push_back(fmt::format("memory budget {} of {}", GB(b.memory), GB(node_memory)));
  } else {
    parts.push_back(fmt::format("memory budget {}", GB(b.memory)));
  }
  b.why = parts[0] + ", " + parts[1];
  if (b.shared) b.why += fmt::format(": {} ranks share this node ({})", n, share.source);
  return b;
}

Result<std::unique_ptr<NodeBudget>> NodeBudget::Create(const PipelineOptions& o,
                                                       const RankInfo& rank, int64_t min_memory) {
  long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
  int64_t phys = pages > 0 && psz > 0 ? int64_t(pages) * psz : (int64_t(8) << 30);
  int64_t node_memory = std::min<int64_t>(phys / 4, int64_t(8) << 30);
  // The registry only matters when someone may share the node, so ask for it only then.
  bool need = rank.world_size > 1 && (o.cpu_budget <= 0 || o.memory_budget <= 0);
  return Create(o, rank, min_memory, AvailableCpus(), node_memory,
                [](const char* k) { return std::getenv(k); },
                need ? PipelineRegistry::DefaultDir() : std::string());
}

Result<std::unique_ptr<NodeBudget>> NodeBudget::Create(const PipelineOptions& o,
                                                       const RankInfo& rank, int64_t min_memory,
                                                       int node_cpus, int64_t node_memory,
                                                       const GetEnvFn& getenv,
                                                       const std::string& registry_dir) {
  std::unique_ptr<NodeBudget> nb(new NodeBudget());
  nb->cpu_opt_ = o.cpu_budget;
  nb->mem_opt_ = o.memory_budget;
  nb->node_cpus_ = std::max(1, node_cpus);
  nb->node_memory_ = node_memory;
  nb->min_memory_ = min_memory;
  bool explicit_both = o.cpu_budget > 0 && o.memory_budget > 0;
  if (!explicit_both) {
    STOKER_ASSIGN_OR_RETURN(nb->share_, NodeShareFromEnv(getenv));
    if (nb->share_.ranks == 0) {
      nb->share_ = NodeShare{};
      if (rank.world_size > 1 && !registry_dir.empty()) {
        auto reg = std::make_unique<PipelineRegistry>(registry_dir);
        auto entry = reg->Register();
        if (entry.ok()) {  // without a registry the pipeline still runs, on the whole node
          nb->entry_ = std::move(entry).value();
          nb->registry_ = std::move(reg);
          nb->share_.from_registry = true;
          nb->share_.ranks = std::max(1, nb->registry_->CountAlive());
          nb->share_.source = fmt::format("{} stoker pipelines alive on this node",
                                          nb->share_.ranks);
        }
      }
    }
  }
  nb->budgets_ = SplitBudgets(o.cpu_budget, o.memory_budget, nb->node_cpus_, node_memory,
                              min_memory, nb->share_);
  return nb;
}

int NodeBudget::max_cpus() const {
  return registry_ && cpu_opt_ <= 0 ? std::max(node_cpus_, budgets_.cpus) : budgets_.cpus;
}

bool NodeBudget::Refresh(int64_t now_ns, std::string* what) {
  if (!registry_ || cpu_opt_ > 0) return false;
  if (last_refresh_ns_ != 0 && now_ns - last_refresh_ns_ < 1'000'000'000) return false;
  last_refresh_ns_ = now_ns;
  int n = std::max(1, registry_->CountAlive());
  if (n == share_.ranks) return false;
  NodeShare next = share_;
  next.ranks = n;
  next.source = fmt::format("{} stoker pipelines alive on this node", n);
  // Memory stays as it was: buffers are already allocated.
  Budgets b = SplitBudgets(cpu_opt_, budgets_.memory, node_cpus_, node_memory_, min_memory_, next);
  int before = budgets_.cpus;
  share_ = next;
  b.why = n > 1 ? fmt::format("cpu budget {} of {} cores: {} ranks share this node ({})",
                              b.cpus, node_cpus_, n, next.source)
                : fmt::format("cpu budget {} (all cores): no other stoker pipeline alive on "
                              "this node",
                              b.cpus);
  b.shared = n > 1;
  budgets_.why = b.why;
  budgets_.shared = b.shared;
  budgets_.cpus = b.cpus;
  if (b.cpus == before) return false;
  if (what)
    *what = fmt::format("cpu budget {} -> {}: {}", before, b.cpus,
                        n > 1 ? next.source : "no other stoker pipeline alive on this node");
  return true;
}

}  // namespace stoker
