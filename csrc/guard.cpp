// musaenv._guard: the kernel-facing half of the worker sandbox (see docs/sandbox.md).
//
// Three measures, all through raw syscalls so that nothing beyond libc is needed:
//   * a seccomp-BPF filter (network sockets, process creation, exec, admin syscalls) installed on every thread;
//   * a Landlock ruleset that forbids writes outside a few paths, applied to every thread;
//   * dropping all capabilities on every thread (the worker may run as root in containers).
// Landlock and capabilities are per-thread in the kernel and Landlock has no thread-sync flag at ABI <= 7, so the
// threads that already exist (an OpenBLAS pool is started by `import numpy`/`import torch`) are reached with a
// real-time signal whose handler applies the same change on that thread, the way Go's AllThreadsSyscall does.
//
// The seccomp program itself is assembled once, in Python (musaenv/isolation/seccomp.py); this module only loads it.

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <dirent.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace py = pybind11;

namespace {

// ---- constants (defined here: distro headers lag the kernel; values from the kernel's uapi headers) ----------------
constexpr unsigned kSetModeFilter = 1;  // SECCOMP_SET_MODE_FILTER
constexpr unsigned kFilterTsync = 1;    // SECCOMP_FILTER_FLAG_TSYNC
constexpr size_t kBpfMaxInsns = 4096;   // BPF_MAXINSNS
// Syscalls newer than some distro headers; the numbers are shared by all architectures since Linux 5.1.
constexpr long kNrLandlockCreate = 444, kNrLandlockAddRule = 445, kNrLandlockRestrict = 446;

// Landlock (include/uapi/linux/landlock.h, kernel 6.15 = ABI 7).
constexpr uint64_t kFsWriteFile = 1ULL << 1, kFsRemoveDir = 1ULL << 4, kFsRemoveFile = 1ULL << 5,
                   kFsMakeChar = 1ULL << 6, kFsMakeDir = 1ULL << 7, kFsMakeReg = 1ULL << 8, kFsMakeSock = 1ULL << 9,
                   kFsMakeFifo = 1ULL << 10, kFsMakeBlock = 1ULL << 11, kFsMakeSym = 1ULL << 12,
                   kFsRefer = 1ULL << 13, kFsTruncate = 1ULL << 14;
constexpr uint64_t kNetBindTcp = 1ULL << 0, kNetConnectTcp = 1ULL << 1;
constexpr uint64_t kScopeAbstractUnix = 1ULL << 0, kScopeSignal = 1ULL << 1;
constexpr uint32_t kCreateRulesetVersion = 1U << 0;
constexpr int kRulePathBeneath = 1;

struct RulesetAttr {
  uint64_t handled_access_fs;
  uint64_t handled_access_net;  // ABI >= 4
  uint64_t scoped;              // ABI >= 6
};
struct __attribute__((packed)) PathBeneathAttr {
  uint64_t allowed_access;
  int32_t parent_fd;
};

[[noreturn]] void raise_os(int err, const std::string& what) {
  // OSError(errno, msg) becomes the matching subclass (PermissionError, ...) in Python.
  py::object exc = py::module_::import("builtins").attr("OSError")(err, what + ": " + std::strerror(err));
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
  throw py::error_already_set();
}

// ---- seccomp ------------------------------------------------------------------------------------------------------
void install_seccomp_program(const py::bytes& program) {
  std::string code = program;  // a private copy the kernel reads while this call runs
  const size_t n = code.size() / sizeof(sock_filter);
  if (n == 0 || n > kBpfMaxInsns || code.size() % sizeof(sock_filter) != 0) {
    raise_os(EINVAL, "a seccomp program is 1 to 4096 instructions of 8 bytes, got " + std::to_string(code.size()));
  }
  std::vector<sock_filter> p(n);
  std::memcpy(p.data(), code.data(), code.size());
  sock_fprog prog{static_cast<unsigned short>(n), p.data()};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) raise_os(errno, "prctl(PR_SET_NO_NEW_PRIVS)");
  // TSYNC: the filter covers the threads torch/OpenBLAS already started, not only this one.
  long rc = syscall(__NR_seccomp, kSetModeFilter, kFilterTsync, &prog);
  if (rc < 0) raise_os(errno, "seccomp(SECCOMP_SET_MODE_FILTER, TSYNC)");
  if (rc > 0) raise_os(EAGAIN, "seccomp TSYNC failed on thread " + std::to_string(rc));
}

// ---- per-thread changes broadcast to every thread -----------------------------------------------------------------
struct ThreadOp {
  int ruleset_fd = -1;  // landlock_restrict_self(fd) when >= 0
  bool drop_caps = false;
};
ThreadOp g_op;
std::atomic<int> g_ok{0}, g_fail{0};
std::pair<int, int> g_last_sync{0, 0};

int drop_caps_this_thread() {
  for (int cap = 0; cap < 64; ++cap) prctl(PR_CAPBSET_DROP, cap, 0, 0, 0);  // EINVAL past the last cap; EPERM if unprivileged
  prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
  struct {
    uint32_t version;
    int pid;
  } hdr{0x20080522, 0};  // _LINUX_CAPABILITY_VERSION_3
  uint32_t data[6] = {0, 0, 0, 0, 0, 0};  // {effective, permitted, inheritable} x 2 words
  return static_cast<int>(syscall(SYS_capset, &hdr, data));
}

int apply_this_thread(const ThreadOp& op) {  // async-signal-safe: raw syscalls only
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return -1;
  if (op.drop_caps && drop_caps_this_thread() != 0) return -1;
  if (op.ruleset_fd >= 0 && syscall(kNrLandlockRestrict, op.ruleset_fd, 0) != 0) return -1;
  return 0;
}

void on_sync_signal(int) {
  const int saved = errno;
  (apply_this_thread(g_op) == 0 ? g_ok : g_fail).fetch_add(1);
  errno = saved;
}

std::set<pid_t> other_threads() {
  std::set<pid_t> tids;
  const pid_t self = static_cast<pid_t>(syscall(SYS_gettid));
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* ent = readdir(d)) {
      const pid_t t = static_cast<pid_t>(std::atoi(ent->d_name));
      if (t > 0 && t != self) tids.insert(t);
    }
    closedir(d);
  }
  return tids;
}

int free_rt_signal(struct sigaction* old) {
  for (int s = SIGRTMAX - 1; s > SIGRTMIN + 1; --s) {
    if (sigaction(s, nullptr, old) == 0 && old->sa_handler == SIG_DFL && !(old->sa_flags & SA_SIGINFO)) return s;
  }
  return -1;
}

// Applies `op` on every other thread; returns (threads signalled, threads that confirmed success).
std::pair<int, int> for_other_threads(const ThreadOp& op) {
  struct sigaction old {};
  const int sig = free_rt_signal(&old);
  std::set<pid_t> pending = other_threads();
  if (sig < 0) return {static_cast<int>(pending.size()), 0};
  g_op = op;
  g_ok = 0;
  g_fail = 0;
  struct sigaction sa {};
  sa.sa_handler = on_sync_signal;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaction(sig, &sa, nullptr);
  std::set<pid_t> done;
  int sent = 0;
  // A thread may start while we signal; it inherits from its creator, so a few rounds reach a fixed point.
  for (int round = 0; round < 4 && !pending.empty(); ++round) {
    for (pid_t t : pending) {
      if (syscall(SYS_tgkill, getpid(), t, sig) == 0) ++sent;
      done.insert(t);
    }
    timespec ms{0, 1000000};
    for (int i = 0; i < 2000 && g_ok + g_fail < sent; ++i) nanosleep(&ms, nullptr);  // at most ~2 s per round
    pending.clear();
    for (pid_t t : other_threads()) {
      if (!done.count(t)) pending.insert(t);
    }
  }
  const int ok = g_ok.load();
  // A late handler after SIG_DFL would kill the process (default action of real-time signals), so the handler
  // stays installed when a thread has not answered yet.
  if (g_ok + g_fail >= sent) sigaction(sig, &old, nullptr);
  return {sent, ok};
}

void drop_capabilities() {
  ThreadOp op;
  op.drop_caps = true;
  g_last_sync = for_other_threads(op);
  if (apply_this_thread(op) != 0) raise_os(errno, "capset/no_new_privs");
}

// ---- Landlock -----------------------------------------------------------------------------------------------------
int landlock_abi() {
  const long v = syscall(kNrLandlockCreate, nullptr, 0, kCreateRulesetVersion);
  return v > 0 ? static_cast<int>(v) : 0;
}

uint64_t write_rights(int abi) {
  uint64_t r = kFsWriteFile | kFsRemoveDir | kFsRemoveFile | kFsMakeChar | kFsMakeDir | kFsMakeReg | kFsMakeSock |
               kFsMakeFifo | kFsMakeBlock | kFsMakeSym;
  if (abi >= 2) r |= kFsRefer;     // cross-directory rename/link
  if (abi >= 3) r |= kFsTruncate;  // truncate(2), O_TRUNC
  return r;
}

int restrict_writes(const std::vector<std::string>& allowed, bool deny_tcp, bool scope) {
  const int abi = landlock_abi();
  if (abi <= 0) return 0;
  const uint64_t fs = write_rights(abi);
  RulesetAttr attr{fs, (deny_tcp && abi >= 4) ? (kNetBindTcp | kNetConnectTcp) : 0,
                   (scope && abi >= 6) ? (kScopeAbstractUnix | kScopeSignal) : 0};
  const size_t size = abi >= 6 ? sizeof(RulesetAttr) : abi >= 4 ? 2 * sizeof(uint64_t) : sizeof(uint64_t);
  const int rfd = static_cast<int>(syscall(kNrLandlockCreate, &attr, size, 0));
  if (rfd < 0) raise_os(errno, "landlock_create_ruleset");
  for (const std::string& path : allowed) {
    const int pfd = open(path.c_str(), O_PATH | O_CLOEXEC);
    struct stat st {};
    if (pfd < 0 || fstat(pfd, &st) != 0) {
      const int err = errno;
      if (pfd >= 0) close(pfd);
      close(rfd);
      raise_os(err, "landlock: cannot open " + path);
    }
    // A file (a device node) only takes file rights; the directory rights would make add_rule fail with EINVAL.
    PathBeneathAttr rule{S_ISDIR(st.st_mode) ? fs : (fs & (kFsWriteFile | kFsTruncate)), pfd};
    const long rc = syscall(kNrLandlockAddRule, rfd, kRulePathBeneath, &rule, 0);
    const int err = errno;
    close(pfd);
    if (rc != 0) {
      close(rfd);
      raise_os(err, "landlock_add_rule " + path);
    }
  }
  ThreadOp op;
  op.ruleset_fd = rfd;
  // Other threads first: with the signal scope on, this thread could no longer signal threads outside its domain.
  g_last_sync = for_other_threads(op);
  const int rc = apply_this_thread(op);
  const int err = errno;
  close(rfd);
  if (rc != 0) raise_os(err, "landlock_restrict_self");
  return abi;
}

}  // namespace

PYBIND11_MODULE(_guard, m) {
  m.doc() = "Kernel-level guards for the musaenv worker: seccomp-BPF, Landlock, capabilities (Linux only).";
  m.def("install_seccomp_program", &install_seccomp_program, py::arg("program"),
        "Set no_new_privs and load `program` (musaenv.isolation.seccomp.seccomp_program's bytes, 8 per\n"
        "instruction) as the seccomp filter of every thread (TSYNC). Raises OSError when the kernel refuses.");
  m.def("landlock_abi", &landlock_abi, "Landlock ABI version of the running kernel, 0 when unsupported.");
  m.def("restrict_writes", &restrict_writes, py::arg("allowed_paths"), py::arg("deny_tcp") = false,
        py::arg("scope") = false,
        "Forbid creating, writing, truncating, renaming and removing files outside `allowed_paths` on every\n"
        "thread (Landlock). deny_tcp (ABI >= 4) also denies TCP bind/connect; scope (ABI >= 6) denies signals\n"
        "and abstract Unix sockets to processes outside the sandbox. Returns the ABI used, 0 when unsupported.");
  m.def("drop_capabilities", &drop_capabilities,
        "Clear the bounding, ambient, effective, permitted and inheritable capability sets on every thread.");
  m.def(
      "last_thread_sync", []() { return g_last_sync; },
      "(other threads signalled, threads that applied the change) for the last restrict_writes/drop_capabilities.");
}
