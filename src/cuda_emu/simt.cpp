// Note [SIMT emulation]
// A launch runs on the calling host thread, holding the one device lock (one kernel at a
// time, so atomics and `static` shared memory need no more), block after block in
// blockIdx order (x fastest). A block's threads are fibers: each has its own stack (mmap'd
// with a guard page below it) and a saved stack pointer; switching is six callee-saved
// registers, MXCSR and the x87 control word (fsdp_emu_switch below, x86-64 System V), a
// few nanoseconds where ucontext would make a signal-mask system call per switch. Fibers
// are pooled and reused across blocks and launches: a thread's body returns to a loop at
// the fiber's base, which reports Done and waits to be handed the next thread.
//
// The scheduler resumes every Ready fiber in thread order (or in reverse order, see
// schedule_reverse); a fiber runs until it calls
// __syncthreads or a warp collective (it parks with its arguments) or its body returns.
// When none is Ready, it completes every warp collective whose mask is fully parked at
// the same collective, else the block barrier if every live thread is parked there, else
// the block is deadlocked. The exception is a wmma operation (WarpMatrixOp): it executes
// as soon as the warp's last lane reaches it, and that warp runs on at once, ahead of the
// threads after it in schedule order (see run_block). Anything a GPU leaves undefined and that would hang, fault or
// read garbage there fails the launch instead, with the kernel, block and thread named.
//
// AddressSanitizer follows the stack switches through __sanitizer_start_switch_fiber /
// __sanitizer_finish_switch_fiber, so reports from inside a kernel have correct stacks and
// no false positives. A fiber abandoned mid-kernel (its block faulted) gets a fresh stack
// frame and its stack's shadow cleared before reuse.
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "internal.h"

#if defined(__SANITIZE_ADDRESS__)
#define FSDP_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FSDP_EMU_ASAN 1
#endif
#endif

#if defined(FSDP_EMU_ASAN)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

#if !defined(__x86_64__)
#error "the SIMT emulator's fiber switch is written for x86-64 (System V); port fsdp_emu_switch"
#endif

extern "C" void fsdp_emu_switch(void** save_sp, void* load_sp);
extern "C" [[noreturn]] void fsdp_emu_fiber_entry();

// Saves the callee-saved state on the current stack, stores the stack pointer in
// *save_sp, loads load_sp and restores the state saved there; `ret` resumes the other side.
asm(R"(
  .text
  .globl fsdp_emu_switch
  .type fsdp_emu_switch,@function
fsdp_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size fsdp_emu_switch,.-fsdp_emu_switch
  .section .note.GNU-stack,"",@progbits
  .text
)");

namespace fsdp_emu {

thread_local const ThreadInfo* tl_thread = nullptr;

namespace {

constexpr size_t kStackBytes = 256 * 1024;

enum class State { Ready, Barrier, Warp, Done, Faulted };

struct Fiber {
  void* sp = nullptr;
  char* map = nullptr;  // guard page + stack
  char* stack_lo = nullptr;
  size_t stack_size = 0;
  void* fake_stack = nullptr;
  bool started = false;  // has run fsdp_emu_fiber_entry since its stack was (re)made
  ThreadInfo info{};
  State state = State::Done;
  // The parked collective.
  WarpOp op = WarpOp::Sync;
  unsigned mask = 0;
  uint64_t in = 0, out = 0;
  int arg = 0, width = 32;
  int pred = 0;        // __syncthreads_count/and/or
  int barrier_kind = -1;

  Fiber() {
    const size_t page = size_t(sysconf(_SC_PAGESIZE));
    map = static_cast<char*>(mmap(nullptr, kStackBytes + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    if (map == MAP_FAILED) {
      std::fprintf(stderr, "fsdp_emu: cannot map a %zu-byte fiber stack\n", kStackBytes);
      std::abort();
    }
    mprotect(map, page, PROT_NONE);  // overflow faults instead of corrupting a neighbour
    stack_lo = map + page;
    stack_size = kStackBytes;
    reset();
  }
  ~Fiber() { munmap(map, kStackBytes + size_t(sysconf(_SC_PAGESIZE))); }

  // A fresh frame that `ret`s into fsdp_emu_fiber_entry (layout: see fsdp_emu_switch).
  void reset() {
#if defined(FSDP_EMU_ASAN)
    ASAN_UNPOISON_MEMORY_REGION(stack_lo, stack_size);
#endif
    auto top = reinterpret_cast<uintptr_t>(stack_lo + stack_size) & ~uintptr_t(15);
    void** p = reinterpret_cast<void**>(top);
    *--p = nullptr;  // return address of the entry function, which never returns
    *--p = reinterpret_cast<void*>(&fsdp_emu_fiber_entry);
    for (int i = 0; i < 6; ++i) *--p = nullptr;  // rbp rbx r12 r13 r14 r15
    --p;
    uint32_t csr[2] = {0x1f80u, 0x037fu};  // default MXCSR, x87 control word
    std::memcpy(p, csr, sizeof(csr));
    sp = p;
    started = false;
    fake_stack = nullptr;
  }
};

struct Scheduler {
  std::vector<std::unique_ptr<Fiber>> pool;
  void* sp = nullptr;  // the scheduler's stack pointer while a fiber runs
  const void* asan_bottom = nullptr;
  size_t asan_size = 0;
  Fiber* current = nullptr;
  std::vector<Fiber*> block;  // the running block's threads, in linear order
  const LaunchSpec* spec = nullptr;
  int nthreads = 0;
  void* dyn_smem = nullptr;
  // The first fault of the running launch.
  cudaError_t fault_error = cudaSuccess;
  std::string fault_msg;
};

Scheduler& sched() {
  thread_local Scheduler s;
  return s;
}

std::mutex& device_lock() {
  static std::mutex m;
  return m;
}

std::string idx3(uint3 v) {
  char b[48];
  std::snprintf(b, sizeof b, "(%u,%u,%u)", v.x, v.y, v.z);
  return b;
}

std::string where(const Fiber& f) {
  return "kernel '" + std::string(sched().spec->name) + "' block " + idx3(f.info.block_idx) + " thread " +
         idx3(f.info.thread_idx);
}

void fault(const Fiber& f, cudaError_t e, const std::string& what) {
  Scheduler& s = sched();
  if (s.fault_error != cudaSuccess) return;
  s.fault_error = e;
  s.fault_msg = where(f) + ": " + what;
}

// ---- switching -------------------------------------------------------------------------
void resume(Fiber* f) {
  Scheduler& s = sched();
  s.current = f;
  tl_thread = &f->info;
  void* fake = nullptr;
#if defined(FSDP_EMU_ASAN)
  __sanitizer_start_switch_fiber(&fake, f->stack_lo, f->stack_size);
#endif
  f->started = true;
  fsdp_emu_switch(&s.sp, f->sp);
#if defined(FSDP_EMU_ASAN)
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
  (void)fake;
  tl_thread = nullptr;
  s.current = nullptr;
}

// From a fiber back to the scheduler; returns when the scheduler resumes this fiber.
void park(Fiber* f, State st) {
  Scheduler& s = sched();
  f->state = st;
#if defined(FSDP_EMU_ASAN)
  __sanitizer_start_switch_fiber(&f->fake_stack, s.asan_bottom, s.asan_size);
#endif
  fsdp_emu_switch(&f->sp, s.sp);
#if defined(FSDP_EMU_ASAN)
  __sanitizer_finish_switch_fiber(f->fake_stack, &s.asan_bottom, &s.asan_size);
#endif
}

Fiber* running(const char* what) {
  Fiber* f = sched().current;
  if (f == nullptr) {
    std::fprintf(stderr, "fsdp_emu: %s called outside a kernel\n", what);
    std::abort();
  }
  return f;
}

const char* op_name(WarpOp op) {
  switch (op) {
    case WarpOp::Shfl: return "__shfl_sync";
    case WarpOp::ShflUp: return "__shfl_up_sync";
    case WarpOp::ShflDown: return "__shfl_down_sync";
    case WarpOp::ShflXor: return "__shfl_xor_sync";
    case WarpOp::All: return "__all_sync";
    case WarpOp::Any: return "__any_sync";
    case WarpOp::Ballot: return "__ballot_sync";
    case WarpOp::Sync: return "__syncwarp";
    case WarpOp::Matrix: return "wmma";
  }
  return "?";
}

const WarpMatrixOp& matrix_op(const Fiber& f) { return *reinterpret_cast<const WarpMatrixOp*>(uintptr_t(f.in)); }

// The collective a parked lane is at, for messages: a wmma operation by its own name.
std::string coll_name(const Fiber& f) { return f.op == WarpOp::Matrix ? matrix_op(f).name : op_name(f.op); }

std::string matrix_args(const WarpMatrixOp& m) {
  char b[96];
  std::snprintf(b, sizeof b, "(mptr %p, ldm %u, layout %s)", m.mem, m.ldm, m.layout == 0 ? "row-major" : "col-major");
  return b;
}

// Lanes `a` and `b`, both parked at a wmma operation, reached the same one with the same
// uniform arguments; else the launch faults.
bool same_matrix_op(const Fiber& a, int la, const Fiber& b, int lb) {
  const WarpMatrixOp &x = matrix_op(a), &y = matrix_op(b);
  if (x.run == y.run && x.name == y.name && x.mem == y.mem && x.ldm == y.ldm && x.layout == y.layout)
    return true;  // the common case, without string compares
  if (x.run != y.run || std::strcmp(x.name, y.name) != 0) {
    fault(a, cudaErrorIllegalInstruction,
          "lanes of one warp reached different wmma operations: lane " + std::to_string(la) + " " + x.name +
              " and lane " + std::to_string(lb) + " " + y.name + " (or the same one with other fragment types)");
    return false;
  }
  if (x.mem != y.mem || x.ldm != y.ldm || x.layout != y.layout) {
    fault(a, cudaErrorIllegalInstruction,
          std::string(x.name) + " with arguments that differ between lanes of the warp, which CUDA requires to be "
                                "the same: lane " + std::to_string(la) + " " + matrix_args(x) + ", lane " +
              std::to_string(lb) + " " + matrix_args(y));
    return false;
  }
  return true;
}

std::string hex(unsigned v) {
  char b[16];
  std::snprintf(b, sizeof b, "0x%08x", v);
  return b;
}

// ---- completing collectives ------------------------------------------------------------
// The lane a shuffle reads for `lane`, or -1 for "keeps its own value".
int shuffle_source(const Fiber& f, int lane) {
  const int w = f.width;
  const int base = lane & ~(w - 1);
  switch (f.op) {
    case WarpOp::Shfl: return base + (f.arg & (w - 1));
    case WarpOp::ShflUp: return lane - f.arg >= base ? lane - f.arg : -1;
    case WarpOp::ShflDown: return lane + f.arg < base + w ? lane + f.arg : -1;
    case WarpOp::ShflXor: return (lane ^ f.arg) < base + w ? (lane ^ f.arg) : -1;
    default: return -1;
  }
}

// Completes the collectives of the warp at lane w0 whose lanes have all arrived; false when
// a fault was found. Lanes are handled a mask group at a time (the lowest parked lane not
// yet seen and the lanes its mask names), so a pass costs O(32) per group, not O(32^2).
bool complete_warp(std::vector<Fiber*>& t, int n, int w0, bool* released) {
  {
    const int lanes = n - w0 < 32 ? n - w0 : 32;
    const unsigned exists = lanes == 32 ? 0xffffffffu : (1u << lanes) - 1u;
    unsigned parked = 0, done = 0;
    for (int l = 0; l < lanes; ++l) {
      const State st = t[size_t(w0 + l)]->state;
      parked |= unsigned(st == State::Warp) << l;
      done |= unsigned(st == State::Done) << l;
    }
    unsigned todo = parked;
    while (todo != 0) {
      const int l = __builtin_ctz(todo);
      Fiber& f = *t[size_t(w0 + l)];
      const unsigned mask = f.mask;
      todo &= ~(1u << l);
      if ((mask >> l & 1u) == 0) {
        fault(f, cudaErrorIllegalInstruction, coll_name(f) + " with mask " + hex(mask) +
                                                  ", which does not include the calling lane " + std::to_string(l));
        return false;
      }
      if (f.op <= WarpOp::ShflXor && (f.width < 1 || f.width > 32 || (f.width & (f.width - 1)) != 0)) {
        fault(f, cudaErrorIllegalInstruction, std::string(op_name(f.op)) + " with width " + std::to_string(f.width) +
                                                  " (a power of two from 1 to 32)");
        return false;
      }
      if ((mask & ~exists) != 0) {
        fault(f, cudaErrorIllegalInstruction,
              coll_name(f) + " with mask " + hex(mask) + " names lane " +
                  std::to_string(__builtin_ctz(mask & ~exists)) + ", which does not exist (the block has " +
                  std::to_string(n) + " threads)");
        return false;
      }
      if ((mask & done) != 0) {
        fault(f, cudaErrorIllegalInstruction, coll_name(f) + " with mask " + hex(mask) +
                                                  " waits for lane " + std::to_string(__builtin_ctz(mask & done)) +
                                                  ", which has exited");
        return false;
      }
      for (unsigned m = mask & parked & ~(1u << l); m != 0; m &= m - 1) {
        const int b = __builtin_ctz(m);
        const Fiber& o = *t[size_t(w0 + b)];
        if (o.op != f.op || o.mask != mask || (o.op <= WarpOp::ShflXor && o.width != f.width)) {
          fault(f, cudaErrorIllegalInstruction,
                "lanes of one warp reached different collectives: lane " + std::to_string(l) + " " + coll_name(f) +
                    "(mask " + hex(mask) + ") and lane " + std::to_string(b) + " " + coll_name(o) + "(mask " +
                    hex(o.mask) + ")");
          return false;
        }
        if (f.op == WarpOp::Matrix && !same_matrix_op(f, l, o, b)) return false;
      }
      todo &= ~mask;
      if ((mask & ~parked) != 0) continue;  // a lane of the group is still running, or at __syncthreads
      // Every lane of the mask is here: execute the collective in lockstep.
      if (f.op == WarpOp::Matrix) {  // the mask is the full warp (warp_matrix_op)
        WarpMatrixOp* lanes[32];
        for (int b = 0; b < 32; ++b) lanes[b] = reinterpret_cast<WarpMatrixOp*>(uintptr_t(t[size_t(w0 + b)]->in));
        lanes[0]->run(lanes);
      }
      uint64_t all = 1, any = 0, ballot = 0;
      for (unsigned m = mask; m != 0; m &= m - 1) {
        const int b = __builtin_ctz(m);
        const uint64_t p = t[size_t(w0 + b)]->in != 0;
        all &= p;
        any |= p;
        ballot |= p << b;
      }
      for (unsigned m = mask; m != 0; m &= m - 1) {
        const int b = __builtin_ctz(m);
        Fiber& o = *t[size_t(w0 + b)];
        switch (o.op) {
          case WarpOp::All: o.out = all; break;
          case WarpOp::Any: o.out = any; break;
          case WarpOp::Ballot: o.out = ballot; break;
          case WarpOp::Sync:
          case WarpOp::Matrix: o.out = 0; break;
          default: {
            const int src = shuffle_source(o, b);
            if (src < 0) {
              o.out = o.in;
            } else if ((mask >> src & 1u) == 0) {
              fault(o, cudaErrorIllegalInstruction, std::string(op_name(o.op)) + " reads lane " + std::to_string(src) +
                                                        ", which is not in the mask " + hex(mask) +
                                                        " (its value is undefined on a GPU)");
              return false;
            } else {
              o.out = t[size_t(w0 + src)]->in;
            }
          }
        }
      }
      for (unsigned m = mask; m != 0; m &= m - 1) t[size_t(w0 + __builtin_ctz(m))]->state = State::Ready;
      parked &= ~mask;
      *released = true;
    }
  }
  return true;
}

bool complete_warps(std::vector<Fiber*>& t, int n, bool* released) {
  for (int w0 = 0; w0 < n; w0 += 32)
    if (!complete_warp(t, n, w0, released)) return false;
  return true;
}

// Whether every lane of the warp at w0 is parked at a wmma operation.
bool warp_at_matrix_op(const std::vector<Fiber*>& t, int n, int w0) {
  if (n - w0 < 32) return false;  // the mask names missing lanes: complete_warps reports it
  for (int l = 0; l < 32; ++l) {
    const Fiber& f = *t[size_t(w0 + l)];
    if (f.state != State::Warp || f.op != WarpOp::Matrix) return false;
  }
  return true;
}

// Releases __syncthreads when every live thread waits there; false on a fault.
bool complete_barrier(std::vector<Fiber*>& t, int n, bool* released) {
  int waiting = 0, done = -1, kind = -1;
  for (int i = 0; i < n; ++i) {
    const Fiber& f = *t[size_t(i)];
    if (f.state == State::Barrier) {
      ++waiting;
      if (kind == -1) kind = f.barrier_kind;
      if (f.barrier_kind != kind) {
        fault(f, cudaErrorIllegalInstruction, "threads of one block reached different barriers (__syncthreads and "
                                              "__syncthreads_count/_and/_or)");
        return false;
      }
    } else if (f.state == State::Done) {
      if (done < 0) done = i;
    } else {
      return true;  // someone is still at a warp collective
    }
  }
  if (waiting == 0) return true;
  if (done >= 0) {
    fault(*t[size_t(done)], cudaErrorIllegalInstruction,
          "exited while " + std::to_string(waiting) +
              " other threads of its block wait at __syncthreads (a barrier in divergent code)");
    return false;
  }
  int count = 0;
  for (int i = 0; i < n; ++i) count += t[size_t(i)]->pred != 0;
  for (int i = 0; i < n; ++i) {
    Fiber& f = *t[size_t(i)];
    f.out = kind == 0 ? uint64_t(count) : kind == 1 ? uint64_t(count == n) : kind == 2 ? uint64_t(count > 0) : 0;
    f.state = State::Ready;
  }
  *released = true;
  return true;
}

// "12 threads at __syncthreads (first: thread (0,0,0)); 16 at __any_sync(mask 0xffffffff) (first: ...)".
std::string deadlock_summary(std::vector<Fiber*>& t, int n) {
  struct Group {
    std::string what;
    int count;
    uint3 first;
  };
  std::vector<Group> groups;
  for (int i = 0; i < n; ++i) {
    const Fiber& f = *t[size_t(i)];
    if (f.state != State::Barrier && f.state != State::Warp) continue;
    const std::string what =
        f.state == State::Barrier ? std::string("__syncthreads") : coll_name(f) + "(mask " + hex(f.mask) + ")";
    bool found = false;
    for (Group& g : groups)
      if (g.what == what) {
        ++g.count;
        found = true;
      }
    if (!found) groups.push_back(Group{what, 1, f.info.thread_idx});
  }
  std::string s;
  for (const Group& g : groups)
    s += (s.empty() ? "" : "; ") + std::to_string(g.count) + " threads at " + g.what + " (first: thread " + idx3(g.first) + ")";
  return s;
}

// FSDP_EMU_SCHEDULE=reverse (or fsdpEmuSetSchedule(1)) resumes threads in decreasing
// index order. A missing barrier between a write and another thread's read shows up in one
// of the two orders: running the suite under both catches it whichever way it points.
std::atomic<int> g_schedule{-1};

bool schedule_reverse() {
  int v = g_schedule.load(std::memory_order_relaxed);
  if (v < 0) {
    const char* e = std::getenv("FSDP_EMU_SCHEDULE");
    v = e != nullptr && std::strcmp(e, "reverse") == 0 ? 1 : 0;
    g_schedule.store(v, std::memory_order_relaxed);
  }
  return v == 1;
}

void run_block(uint3 block_idx) {
  Scheduler& s = sched();
  const LaunchSpec& spec = *s.spec;
  const int n = s.nthreads;
  std::vector<Fiber*>& t = s.block;
  t.resize(size_t(n));
  int linear = 0;
  for (unsigned z = 0; z < spec.block.z; ++z)
    for (unsigned y = 0; y < spec.block.y; ++y)
      for (unsigned x = 0; x < spec.block.x; ++x, ++linear) {
        Fiber* f = s.pool[size_t(linear)].get();
        f->info = ThreadInfo{uint3{x, y, z}, block_idx, spec.block, spec.grid, unsigned(linear)};
        f->state = State::Ready;
        f->pred = 0;
        t[size_t(linear)] = f;
      }
  if (s.dyn_smem != nullptr) std::memset(s.dyn_smem, 0xff, spec.dynamic_smem);
  const bool reverse = schedule_reverse();
  for (;;) {
    bool progressed = false;
    for (int j = 0; j < n; ++j) {
      const int i = reverse ? n - 1 - j : j;
      if (t[size_t(i)]->state != State::Ready) continue;
      resume(t[size_t(i)]);
      progressed = true;
      if (s.fault_error != cudaSuccess) return;
      // A warp whose last lane reached a wmma operation executes it at once and runs on,
      // ahead of the threads after it in schedule order, until it stops elsewhere (a
      // barrier, a shuffle, its end). A missing __syncthreads between other threads'
      // shared-memory writes and this warp's wmma load, or between its store_matrix_sync
      // and their reads, then shows as a read of unwritten memory (0xff bytes: NaN) or of
      // the previous tile; completing wmma operations with the other collectives, after
      // every thread has run, would keep such warps in lockstep and hide both.
      const int w0 = i & ~31;
      if (t[size_t(i)]->state == State::Warp && t[size_t(i)]->op == WarpOp::Matrix && warp_at_matrix_op(t, n, w0)) {
        bool released = false;
        if (!complete_warp(t, n, w0, &released)) return;
        const int first = reverse ? (w0 + 31 < n ? w0 + 31 : n - 1) : w0;  // the warp's first lane in schedule order
        j = (reverse ? n - 1 - first : first) - 1;
      }
    }
    bool all_done = true;
    for (int i = 0; i < n; ++i) all_done &= t[size_t(i)]->state == State::Done;
    if (all_done) return;
    bool released = false;
    if (!complete_warps(t, n, &released)) return;
    if (!released && !complete_barrier(t, n, &released)) return;
    if (!released && !progressed) {
      for (int i = 0; i < n; ++i)
        if (t[size_t(i)]->state != State::Done) {
          fault(*t[size_t(i)], cudaErrorLaunchFailure,
                "deadlock: no thread of the block can proceed (" + deadlock_summary(t, n) + ")");
          return;
        }
    }
  }
}

}  // namespace

}  // namespace fsdp_emu

// The base of every fiber: runs the threads it is handed, one body after another.
extern "C" [[noreturn]] void fsdp_emu_fiber_entry() {
  using namespace fsdp_emu;
  Scheduler& s = sched();
#if defined(FSDP_EMU_ASAN)
  __sanitizer_finish_switch_fiber(nullptr, &s.asan_bottom, &s.asan_size);
#endif
  for (;;) {
    Fiber* f = s.current;
    s.spec->body(s.spec->ctx);
    park(f, State::Done);
  }
}

namespace fsdp_emu {

uint64_t warp_collective(WarpOp op, unsigned mask, uint64_t value, int arg, int width) {
  Fiber* f = running(op_name(op));
  f->op = op;
  f->mask = mask;
  f->in = value;
  f->arg = arg;
  f->width = width;
  park(f, State::Warp);
  return f->out;
}

void warp_matrix_op(WarpMatrixOp* op) {
  warp_collective(WarpOp::Matrix, 0xffffffffu, uint64_t(reinterpret_cast<uintptr_t>(op)), 0, 32);
}

void syncthreads() {
  Fiber* f = running("__syncthreads");
  f->barrier_kind = 3;
  f->pred = 0;
  park(f, State::Barrier);
}

int syncthreads_reduce(int kind, int pred) {
  Fiber* f = running("__syncthreads_count/_and/_or");
  f->barrier_kind = kind;
  f->pred = pred != 0;
  park(f, State::Barrier);
  return int(f->out);
}

void device_fault(int error, const char* what) {
  Fiber* f = running(what);
  fault(*f, cudaError_t(error), what);
  park(f, State::Faulted);
  std::abort();  // never resumed
}

void* dynamic_shared_memory() {
  running("dynamic shared memory");
  return sched().dyn_smem;
}

unsigned active_mask() {
  Fiber* f = running("__activemask");
  Scheduler& s = sched();
  const int w0 = int(f->info.linear) & ~31;
  unsigned m = 0;
  for (int b = 0; b < 32 && w0 + b < s.nthreads; ++b)
    if (s.pool[size_t(w0 + b)]->state != State::Done) m |= 1u << b;
  return m;
}

void set_schedule(int reverse) { g_schedule.store(reverse < 0 ? -1 : reverse != 0 ? 1 : 0, std::memory_order_relaxed); }

cudaError_t launch_erased(const LaunchSpec& spec) {
  if (tl_thread != nullptr)
    return fail(cudaErrorNotSupported, std::string("kernel '") + spec.name +
                                           "' launched from device code: dynamic parallelism is not emulated");
  const std::string name = std::string("kernel '") + spec.name + "'";
  const dim3 b = spec.block, g = spec.grid;
  const unsigned bd[3] = {b.x, b.y, b.z};
  const unsigned gd[3] = {g.x, g.y, g.z};
  for (int d = 0; d < 3; ++d) {
    if (bd[d] < 1 || bd[d] > unsigned(kMaxBlockDim[d]))
      return fail(cudaErrorInvalidConfiguration, name + " launched with blockDim " + idx3(b) + ": each extent must be 1.." +
                                                     "(1024, 1024, 64)");
    if (gd[d] < 1 || (long long)gd[d] > kMaxGridDim[d])
      return fail(cudaErrorInvalidConfiguration,
                  name + " launched with gridDim " + idx3(g) + ": each extent must be 1..(2^31-1, 65535, 65535)");
  }
  const long long threads = (long long)b.x * b.y * b.z;
  if (threads > kMaxThreadsPerBlock)
    return fail(cudaErrorInvalidConfiguration, name + " launched with " + std::to_string(threads) +
                                                   " threads per block (blockDim " + idx3(b) + "); the limit is 1024");
  const size_t smem_limit = max_dynamic_shared(spec.kernel);
  if (spec.dynamic_smem > smem_limit)
    return fail(cudaErrorInvalidValue,
                name + " requests " + std::to_string(spec.dynamic_smem) + " bytes of dynamic shared memory; the limit is " +
                    std::to_string(smem_limit) +
                    (smem_limit == kSharedMemPerBlock
                         ? " (48 KiB) unless cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, n)"
                           " raises it, up to 227 KiB"
                         : " (its cudaFuncAttributeMaxDynamicSharedMemorySize)"));
  std::string why;
  const int device = stream_device(spec.stream, &why);
  if (device < 0) return fail(cudaErrorInvalidResourceHandle, name + " launched on " + why);
  for (int i = 0; i < spec.num_pointer_args; ++i) {
    const void* p = spec.pointer_args[i];
    if (!device_accessible(p, 0, device))
      return fail(cudaErrorIllegalAddress,
                  name + " argument " + std::to_string(spec.pointer_arg_index[i]) + " is " + describe_pointer(p) +
                      ", which a kernel on cuda:" + std::to_string(device) + " cannot dereference");
  }

  drain(spec.stream);  // the stream's queued copies come first (Note [Deferred copies])
  std::lock_guard<std::mutex> lock(device_lock());
  Scheduler& s = sched();
  while (s.pool.size() < size_t(threads)) s.pool.push_back(std::make_unique<Fiber>());
  s.spec = &spec;
  s.nthreads = int(threads);
  s.fault_error = cudaSuccess;
  s.fault_msg.clear();
  // Exactly the requested bytes, so ASan catches a kernel reading past them.
  std::unique_ptr<void, decltype(&std::free)> smem(std::malloc(spec.dynamic_smem), &std::free);
  s.dyn_smem = smem.get();
  for (unsigned z = 0; z < g.z && s.fault_error == cudaSuccess; ++z)
    for (unsigned y = 0; y < g.y && s.fault_error == cudaSuccess; ++y)
      for (unsigned x = 0; x < g.x && s.fault_error == cudaSuccess; ++x) run_block(uint3{x, y, z});
  if (s.fault_error != cudaSuccess) {
    // Threads of the failed block may be parked mid-kernel: give them fresh stacks.
    for (int i = 0; i < s.nthreads; ++i) {
      Fiber& f = *s.pool[size_t(i)];
      if (f.state != State::Done && f.started) f.reset();
      f.state = State::Done;
    }
  }
  s.spec = nullptr;
  s.dyn_smem = nullptr;
  if (s.fault_error != cudaSuccess) return fail(s.fault_error, s.fault_msg);
  return cudaSuccess;
}

}  // namespace fsdp_emu
