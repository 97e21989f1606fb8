// Operator recorder of the run worker: one global at::RecordFunction callback that counts the
// torch operators executed while the solution runs. Loaded with ctypes before any solution code
// (sandbox/recorder.py), compiled once per machine by the judge; no pybind, no torch extension.
//
// Why a global C++ callback: it costs ~0.2-0.3 us per operator, so it stays installed for every
// call of the solution's forward (verified trials, warm-up, timed runs alike) and a solution
// cannot tell timed calls from verified ones by the recorder's state; and it sees operators run
// on any thread, not only the calling one. Python dispatch modes cost ~15 us per operator.
//
// What is counted: operators torch had registered when the recorder was installed (the
// solution's own operators come later), except the allowed ones (allocation, views, copies),
//   - on the harness thread only while a call is in progress (rec_in_call), so the harness's
//     own work between calls (input generation, copies of outputs) is not;
//   - on every other thread whenever the recorder is armed.
#include <ATen/record_function.h>

#include <pthread.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

namespace {

struct Recorder {
  std::vector<std::string> names;              // storage for the views below
  std::unordered_set<std::string_view> watched;
  std::atomic<bool> armed{false};
  std::atomic<bool> in_call{false};
  std::atomic<bool> canary{false};
  std::atomic<long long> canary_seen{0};
  std::atomic<uintptr_t> harness{0};
  std::mutex mu;
  std::map<std::string, long long> seen;      // "aten::relu" or "aten::relu@thread" -> count
  at::CallbackHandle handle = at::INVALID_CALLBACK_HANDLE;
};

// Never destroyed: callbacks may still fire while the process exits.
Recorder& recorder() {
  static Recorder* r = new Recorder();
  return *r;
}

uintptr_t this_thread() { return static_cast<uintptr_t>(pthread_self()); }

// 0: not counted; 1: harness thread during a call; 2: another thread.
int where(const Recorder& r) {
  if (!r.armed.load(std::memory_order_relaxed)) return 0;
  if (this_thread() != r.harness.load(std::memory_order_relaxed)) return 2;
  return r.in_call.load(std::memory_order_relaxed) ? 1 : 0;
}

void note(Recorder& r, const std::string& what) {
  std::lock_guard<std::mutex> lock(r.mu);
  r.seen[what] += 1;
}

std::unique_ptr<at::ObserverContext> on_operator(const at::RecordFunction& fn) {
  Recorder& r = recorder();
  const int at = where(r);
  if (at == 0) return nullptr;
  const char* name = fn.name();
  if (r.watched.find(std::string_view(name)) == r.watched.end()) return nullptr;
  if (at == 1 && r.canary.load(std::memory_order_relaxed)) {
    r.canary_seen.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  note(r, at == 1 ? std::string(name) : std::string(name) + "@thread");
  return nullptr;
}

}  // namespace

extern "C" {

// Install the callback once; `watched` holds operator names ("aten::relu"), one per line.
int rec_install(const char* watched) {
  Recorder& r = recorder();
  if (r.handle != at::INVALID_CALLBACK_HANDLE) return 1;
  std::string all(watched);
  for (size_t start = 0; start < all.size();) {
    size_t end = all.find('\n', start);
    if (end == std::string::npos) end = all.size();
    if (end > start) r.names.push_back(all.substr(start, end - start));
    start = end + 1;
  }
  for (const std::string& name : r.names) r.watched.insert(std::string_view(name));
  r.handle = at::addGlobalCallback(
      at::RecordFunctionCallback(&on_operator).scopes({at::RecordScope::FUNCTION}));
  return r.handle != at::INVALID_CALLBACK_HANDLE;
}

// From now on, count: the calling thread is the harness thread.
void rec_arm() {
  Recorder& r = recorder();
  r.harness.store(this_thread());
  r.armed.store(true);
}

void rec_in_call(int on) { recorder().in_call.store(on != 0); }

// Record `what` as if an operator of that name had been seen here (traps of Python-level
// ways around RecordFunction); `always` records it whatever the thread and call state.
void rec_note(const char* what, int always) {
  Recorder& r = recorder();
  const int at = always ? 1 : where(r);
  if (at != 0) note(r, at == 1 ? std::string(what) : std::string(what) + "@thread");
}

// While on, watched operators on the harness thread count as the canary, not as findings.
long long rec_canary(int on) {
  Recorder& r = recorder();
  r.canary.store(on != 0);
  return on ? (r.canary_seen.store(0), 0) : r.canary_seen.load();
}

// "name\tcount\n" lines into buf; returns the length needed (call again when it is larger).
long long rec_report(char* buf, long long size) {
  Recorder& r = recorder();
  std::string out;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    for (const auto& [name, count] : r.seen) out += name + "\t" + std::to_string(count) + "\n";
  }
  if (static_cast<long long>(out.size()) < size) std::snprintf(buf, size, "%s", out.c_str());
  return static_cast<long long>(out.size()) + 1;
}

}  // extern "C"
