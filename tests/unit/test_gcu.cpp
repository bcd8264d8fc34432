// The gcu device shim (runtime/include/gcu.h, host implementation runtime/gcu/gcu_host.c): memory and copies,
// real asynchrony (a launch returns before its kernel runs; the synchronizing thread or the worker runs it),
// in-order streams, events, cross-stream waits, errors with messages, and thread safety.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "gcu.h"

using Catch::Matchers::Contains;

namespace {

struct SleepArgs {
    std::atomic<int> *flag;
    int ms, value;
};

void sleep_then_set(void *p)
{
    auto *a = static_cast<SleepArgs *>(p);
    std::this_thread::sleep_for(std::chrono::milliseconds(a->ms));
    a->flag->store(a->value);
}

struct AppendArgs {
    std::vector<int> *log;
    int value;
};

void append(void *p)
{
    auto *a = static_cast<AppendArgs *>(p);
    a->log->push_back(a->value);
}

struct ScaleArgs {
    float *data;  // device memory
    int n;
    float by;
};

void scale(void *p)
{
    auto *a = static_cast<ScaleArgs *>(p);
    for (int i = 0; i < a->n; i++) a->data[i] *= a->by;
}

}  // namespace

TEST_CASE("gcu: one device, with properties", "[gcu]")
{
    int n = 0, d = -1;
    REQUIRE(gcu_get_device_count(&n) == GCU_SUCCESS);
    CHECK(n == 1);
    gcu_device_prop prop;
    REQUIRE(gcu_get_device_properties(&prop, 0) == GCU_SUCCESS);
    CHECK(prop.total_memory > 0);
    CHECK(prop.multiprocessors >= 1);
    CHECK(std::string(prop.name).find("gcu") == 0);
    CHECK(gcu_set_device(0) == GCU_SUCCESS);
    CHECK(gcu_get_device(&d) == GCU_SUCCESS);
    CHECK(d == 0);
    CHECK(gcu_set_device(3) == GCU_ERROR_INVALID_DEVICE);
    CHECK_THAT(gcu_last_error_message(), Contains("no device 3"));
    CHECK(std::string(gcu_error_name(GCU_ERROR_NOT_READY)) == "GCU_ERROR_NOT_READY");
}

TEST_CASE("gcu: memory round trips host -> device -> device -> host, memset", "[gcu]")
{
    std::vector<float> host(1000), back(1000, -1.0f);
    for (int i = 0; i < 1000; i++) host[i] = 0.5f * i;
    void *a = nullptr, *b = nullptr;
    REQUIRE(gcu_malloc(&a, sizeof(float) * 1000) == GCU_SUCCESS);
    REQUIRE(gcu_malloc(&b, sizeof(float) * 1000) == GCU_SUCCESS);
    CHECK(reinterpret_cast<uintptr_t>(a) % 64 == 0);
    REQUIRE(gcu_memcpy(a, host.data(), sizeof(float) * 1000, GCU_MEMCPY_HOST_TO_DEVICE) == GCU_SUCCESS);
    REQUIRE(gcu_memcpy(b, a, sizeof(float) * 1000, GCU_MEMCPY_DEVICE_TO_DEVICE) == GCU_SUCCESS);
    REQUIRE(gcu_memcpy(back.data(), b, sizeof(float) * 1000, GCU_MEMCPY_DEVICE_TO_HOST) == GCU_SUCCESS);
    CHECK(back == host);
    // a device pointer plus an offset is a device pointer
    REQUIRE(gcu_memset(static_cast<char *>(b) + 40, 0, 40) == GCU_SUCCESS);
    REQUIRE(gcu_memcpy(back.data(), b, sizeof(float) * 1000, GCU_MEMCPY_DEVICE_TO_HOST) == GCU_SUCCESS);
    CHECK(back[9] == host[9]);
    CHECK(back[10] == 0.0f);
    CHECK(back[19] == 0.0f);
    CHECK(back[20] == host[20]);
    CHECK(gcu_free(a) == GCU_SUCCESS);
    CHECK(gcu_free(b) == GCU_SUCCESS);
    CHECK(gcu_free(nullptr) == GCU_SUCCESS);
}

#if defined(__linux__)
// AnonHugePages (kB) of the mapping holding addr, from /proc/self/smaps; -1 when THP is off ("[never]")
long huge_kb_at(const void *addr)
{
    std::FILE *thp = std::fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (thp) {
        char mode[128] = {0};
        const bool never = std::fgets(mode, sizeof mode, thp) && std::strstr(mode, "[never]");
        std::fclose(thp);
        if (never) return -1;
    }
    std::FILE *f = std::fopen("/proc/self/smaps", "r");
    if (!f) return -1;
    char line[512];
    bool inside = false;
    long kb = 0;
    const auto a = reinterpret_cast<uintptr_t>(addr);
    while (std::fgets(line, sizeof line, f)) {
        unsigned long lo = 0, hi = 0;
        if (std::sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && std::strchr(line, '-') < std::strchr(line, ' ')) {
            inside = lo <= a && a < hi;
        } else if (inside && std::sscanf(line, "AnonHugePages: %ld kB", &kb) == 1) {
            break;
        }
    }
    std::fclose(f);
    return kb;
}

TEST_CASE("gcu: a large allocation (weights) is 2 MiB-aligned and lands on huge pages", "[gcu]")
{
    const size_t bytes = size_t{12} << 20;
    void *p = nullptr;
    REQUIRE(gcu_malloc(&p, bytes) == GCU_SUCCESS);
    CHECK(reinterpret_cast<uintptr_t>(p) % (size_t{2} << 20) == 0);
    REQUIRE(gcu_memset(p, 1, bytes) == GCU_SUCCESS);  // the first touch, after the advice
    const long kb = huge_kb_at(p);
    if (kb < 0) {
        WARN("transparent huge pages are off here: the advice has nothing to act on");
    } else {
        // (the kernel compacts for them at fault; a machine with no 2 MiB page to be had would fail this)
        CHECK(kb >= 8 * 1024);
    }
    CHECK(gcu_free(p) == GCU_SUCCESS);
}
#endif

TEST_CASE("gcu: registered host memory is used in place on the integrated host device", "[gcu]")
{
    gcu_device_prop prop;
    REQUIRE(gcu_get_device_properties(&prop, 0) == GCU_SUCCESS);
    CHECK(prop.integrated == 1);
    std::vector<float> host(100), out(100, -1.0f);
    for (int i = 0; i < 100; i++) host[i] = 1.5f * i;
    void *d = nullptr, *o = nullptr;
    CHECK(gcu_host_get_device_pointer(&d, host.data()) == GCU_ERROR_INVALID_VALUE);  // not registered
    CHECK_THAT(gcu_last_error_message(), Contains("not registered"));
    REQUIRE(gcu_host_register(host.data(), sizeof(float) * 100) == GCU_SUCCESS);
    REQUIRE(gcu_host_register(out.data(), sizeof(float) * 100) == GCU_SUCCESS);
    REQUIRE(gcu_host_get_device_pointer(&d, host.data()) == GCU_SUCCESS);
    REQUIRE(gcu_host_get_device_pointer(&o, out.data()) == GCU_SUCCESS);
    // device copies between mapped buffers; a mapped buffer is also host memory for a copy from the device
    REQUIRE(gcu_memcpy(o, d, sizeof(float) * 50, GCU_MEMCPY_DEVICE_TO_DEVICE) == GCU_SUCCESS);
    CHECK(out[49] == host[49]);
    CHECK(out[50] == -1.0f);
    CHECK(gcu_memcpy(o, d, sizeof(float) * 101, GCU_MEMCPY_DEVICE_TO_DEVICE) == GCU_ERROR_INVALID_VALUE);  // past it
    CHECK(gcu_host_unregister(host.data()) == GCU_SUCCESS);
    CHECK(gcu_host_unregister(out.data()) == GCU_SUCCESS);
    CHECK(gcu_host_unregister(out.data()) == GCU_ERROR_INVALID_VALUE);  // once per register
    CHECK(gcu_memcpy(o, d, sizeof(float), GCU_MEMCPY_DEVICE_TO_DEVICE) == GCU_ERROR_INVALID_VALUE);  // gone
    // the discrete mode: no mapping (a model copies instead)
    setenv("GCU_HOST_DISCRETE", "1", 1);
    REQUIRE(gcu_get_device_properties(&prop, 0) == GCU_SUCCESS);
    CHECK(prop.integrated == 0);
    REQUIRE(gcu_host_register(host.data(), sizeof(float) * 100) == GCU_SUCCESS);
    CHECK(gcu_host_get_device_pointer(&d, host.data()) == GCU_ERROR_NOT_SUPPORTED);
    CHECK(gcu_host_unregister(host.data()) == GCU_SUCCESS);
    unsetenv("GCU_HOST_DISCRETE");
}

TEST_CASE("gcu: host and device pointers are not interchangeable", "[gcu]")
{
    std::vector<float> host(16);
    void *d = nullptr;
    REQUIRE(gcu_malloc(&d, 64) == GCU_SUCCESS);
    CHECK(gcu_memcpy(host.data(), host.data(), 64, GCU_MEMCPY_HOST_TO_DEVICE) == GCU_ERROR_INVALID_VALUE);
    CHECK_THAT(gcu_last_error_message(), Contains("destination") && Contains("not inside a device allocation"));
    CHECK(gcu_memcpy(d, d, 64, GCU_MEMCPY_HOST_TO_DEVICE) == GCU_ERROR_INVALID_VALUE);
    CHECK_THAT(gcu_last_error_message(), Contains("source") && Contains("device memory, not host"));
    CHECK(gcu_memcpy(host.data(), d, 128, GCU_MEMCPY_DEVICE_TO_HOST) == GCU_ERROR_INVALID_VALUE);  // past its end
    CHECK(gcu_memset(host.data(), 0, 4) == GCU_ERROR_INVALID_VALUE);
    CHECK(gcu_free(host.data()) == GCU_ERROR_INVALID_VALUE);
    CHECK_THAT(gcu_last_error_message(), Contains("not the start of a device allocation"));
    CHECK(gcu_free(static_cast<char *>(d) + 4) == GCU_ERROR_INVALID_VALUE);
    CHECK(gcu_launch(nullptr, nullptr, 0, nullptr) == GCU_ERROR_INVALID_VALUE);
    CHECK(gcu_free(d) == GCU_SUCCESS);
    CHECK(gcu_free(d) == GCU_ERROR_INVALID_VALUE);  // twice
}

TEST_CASE("gcu: a launch returns before its kernel runs; synchronize waits for it", "[gcu]")
{
    gcu_stream s;
    REQUIRE(gcu_stream_create(&s) == GCU_SUCCESS);
    std::atomic<int> flag{0};
    SleepArgs args{&flag, 100, 7};
    REQUIRE(gcu_launch(sleep_then_set, &args, sizeof args, s) == GCU_SUCCESS);
    args.value = 99;  // the argument block was copied at launch
    CHECK(flag.load() == 0);
    CHECK(gcu_stream_query(s) == GCU_ERROR_NOT_READY);
    REQUIRE(gcu_stream_synchronize(s) == GCU_SUCCESS);
    CHECK(flag.load() == 7);
    CHECK(gcu_stream_query(s) == GCU_SUCCESS);
    REQUIRE(gcu_stream_destroy(s) == GCU_SUCCESS);
}

TEST_CASE("gcu: a stream runs its work in order, copies included", "[gcu]")
{
    gcu_stream s;
    REQUIRE(gcu_stream_create(&s) == GCU_SUCCESS);
    std::vector<int> log;
    std::atomic<int> flag{0};
    SleepArgs slow{&flag, 30, 1};
    REQUIRE(gcu_launch(sleep_then_set, &slow, sizeof slow, s) == GCU_SUCCESS);
    for (int i = 0; i < 50; i++) {
        AppendArgs a{&log, i};
        REQUIRE(gcu_launch(append, &a, sizeof a, s) == GCU_SUCCESS);
    }
    // copy in, scale on the device, copy out: all queued, nothing waited for until the end
    std::vector<float> host(256, 2.0f), out(256, 0.0f);
    void *d;
    REQUIRE(gcu_malloc(&d, 256 * sizeof(float)) == GCU_SUCCESS);
    REQUIRE(gcu_memcpy_async(d, host.data(), 256 * sizeof(float), GCU_MEMCPY_HOST_TO_DEVICE, s) == GCU_SUCCESS);
    ScaleArgs sc{static_cast<float *>(d), 256, 3.0f};
    REQUIRE(gcu_launch(scale, &sc, sizeof sc, s) == GCU_SUCCESS);
    REQUIRE(gcu_memcpy_async(out.data(), d, 256 * sizeof(float), GCU_MEMCPY_DEVICE_TO_HOST, s) == GCU_SUCCESS);
    REQUIRE(gcu_stream_synchronize(s) == GCU_SUCCESS);
    std::vector<int> want(50);
    for (int i = 0; i < 50; i++) want[i] = i;
    CHECK(log == want);
    CHECK(flag.load() == 1);
    CHECK(out == std::vector<float>(256, 6.0f));
    CHECK(gcu_free(d) == GCU_SUCCESS);
    REQUIRE(gcu_stream_destroy(s) == GCU_SUCCESS);
}

TEST_CASE("gcu: events complete in stream order, time the work, and order another stream", "[gcu]")
{
    gcu_stream a, b;
    gcu_event start, end, never;
    REQUIRE(gcu_stream_create(&a) == GCU_SUCCESS);
    REQUIRE(gcu_stream_create(&b) == GCU_SUCCESS);
    REQUIRE(gcu_event_create(&start) == GCU_SUCCESS);
    REQUIRE(gcu_event_create(&end) == GCU_SUCCESS);
    REQUIRE(gcu_event_create(&never) == GCU_SUCCESS);
    CHECK(gcu_event_query(never) == GCU_ERROR_INVALID_HANDLE);  // never recorded
    CHECK(gcu_event_synchronize(never) == GCU_ERROR_INVALID_HANDLE);

    std::atomic<int> flag{0};
    SleepArgs slow{&flag, 80, 5};
    REQUIRE(gcu_event_record(start, a) == GCU_SUCCESS);
    REQUIRE(gcu_launch(sleep_then_set, &slow, sizeof slow, a) == GCU_SUCCESS);
    REQUIRE(gcu_event_record(end, a) == GCU_SUCCESS);
    CHECK(gcu_event_query(end) == GCU_ERROR_NOT_READY);
    float ms = 0;
    CHECK(gcu_event_elapsed_time(&ms, start, end) == GCU_ERROR_NOT_READY);

    // stream b waits for `end` on stream a before its own kernel reads the flag
    std::vector<int> seen;
    struct ReadArgs {
        std::atomic<int> *flag;
        std::vector<int> *seen;
    } ra{&flag, &seen};
    REQUIRE(gcu_stream_wait_event(b, end) == GCU_SUCCESS);
    REQUIRE(gcu_launch([](void *p) {
        auto *r = static_cast<ReadArgs *>(p);
        r->seen->push_back(r->flag->load());
    }, &ra, sizeof ra, b) == GCU_SUCCESS);
    REQUIRE(gcu_stream_synchronize(b) == GCU_SUCCESS);
    CHECK(seen == std::vector<int>{5});  // the kernel on b ran after the one on a

    REQUIRE(gcu_event_synchronize(end) == GCU_SUCCESS);
    CHECK(gcu_event_query(end) == GCU_SUCCESS);
    REQUIRE(gcu_event_elapsed_time(&ms, start, end) == GCU_SUCCESS);
    CHECK(ms >= 75.0f);
    CHECK(ms < 5000.0f);
    for (gcu_event e : {start, end, never}) CHECK(gcu_event_destroy(e) == GCU_SUCCESS);
    CHECK(gcu_stream_destroy(a) == GCU_SUCCESS);
    CHECK(gcu_stream_destroy(b) == GCU_SUCCESS);
}

TEST_CASE("gcu: the default stream and device-wide synchronize", "[gcu]")
{
    std::atomic<int> f1{0}, f2{0};
    gcu_stream s;
    REQUIRE(gcu_stream_create(&s) == GCU_SUCCESS);
    SleepArgs a1{&f1, 40, 1}, a2{&f2, 60, 2};
    REQUIRE(gcu_launch(sleep_then_set, &a1, sizeof a1, nullptr) == GCU_SUCCESS);  // the default stream
    REQUIRE(gcu_launch(sleep_then_set, &a2, sizeof a2, s) == GCU_SUCCESS);
    REQUIRE(gcu_synchronize() == GCU_SUCCESS);
    CHECK(f1.load() == 1);
    CHECK(f2.load() == 2);
    CHECK(gcu_stream_destroy(s) == GCU_SUCCESS);
    CHECK(gcu_stream_destroy(nullptr) == GCU_ERROR_INVALID_HANDLE);
}

TEST_CASE("gcu: threads use streams, memory and events concurrently", "[gcu]")
{
    constexpr int kThreads = 6, kSteps = 200;
    std::vector<std::thread> threads;
    std::atomic<int> failures{0};
    for (int t = 0; t < kThreads; t++)
        threads.emplace_back([&, t] {
            gcu_stream s;
            gcu_event e;
            if (gcu_stream_create(&s) != GCU_SUCCESS || gcu_event_create(&e) != GCU_SUCCESS) {
                failures++;
                return;
            }
            std::vector<float> host(64, 1.0f + t), out(64);
            void *d;
            for (int i = 0; i < kSteps; i++) {
                if (gcu_malloc(&d, 64 * sizeof(float)) != GCU_SUCCESS) failures++;
                gcu_memcpy_async(d, host.data(), 64 * sizeof(float), GCU_MEMCPY_HOST_TO_DEVICE, s);
                ScaleArgs sc{static_cast<float *>(d), 64, 2.0f};
                gcu_launch(scale, &sc, sizeof sc, s);
                gcu_memcpy_async(out.data(), d, 64 * sizeof(float), GCU_MEMCPY_DEVICE_TO_HOST, s);
                gcu_event_record(e, s);
                gcu_event_synchronize(e);
                if (out != std::vector<float>(64, 2.0f * (1.0f + t))) failures++;
                if (gcu_free(d) != GCU_SUCCESS) failures++;
            }
            gcu_event_destroy(e);
            gcu_stream_destroy(s);
        });
    for (auto &th : threads) th.join();
    CHECK(failures.load() == 0);
}

TEST_CASE("gcu: an event may be destroyed while another stream still waits for it", "[gcu]")
{
    gcu_stream a, b;
    gcu_event e;
    REQUIRE(gcu_stream_create(&a) == GCU_SUCCESS);
    REQUIRE(gcu_stream_create(&b) == GCU_SUCCESS);
    REQUIRE(gcu_event_create(&e) == GCU_SUCCESS);
    std::atomic<int> flag{0};
    SleepArgs slow{&flag, 50, 1}, blocker{&flag, 80, 2};
    REQUIRE(gcu_launch(sleep_then_set, &slow, sizeof slow, a) == GCU_SUCCESS);
    REQUIRE(gcu_event_record(e, a) == GCU_SUCCESS);
    REQUIRE(gcu_launch(sleep_then_set, &blocker, sizeof blocker, b) == GCU_SUCCESS);  // b reaches its wait late
    REQUIRE(gcu_stream_wait_event(b, e) == GCU_SUCCESS);
    CHECK(gcu_event_destroy(e) == GCU_SUCCESS);  // returns once b's wait no longer reads it
    CHECK(gcu_stream_destroy(a) == GCU_SUCCESS);
    CHECK(gcu_stream_destroy(b) == GCU_SUCCESS);
}

struct CountArgs {
    long *counter;            // plain memory: two operations of the stream must never run at once
    std::vector<int> *log;    // the launching thread's own log
    int value;
};

void count(void *p)
{
    auto *a = static_cast<CountArgs *>(p);
    (*a->counter)++;
    a->log->push_back(a->value);
}

TEST_CASE("gcu: threads sharing a stream each synchronize; its work still runs one at a time, in order", "[gcu]")
{
    // launches, spinning and sleeping synchronizes from several threads at once: the stream runs one operation at
    // a time (ThreadSanitizer checks it) and each thread's in launch order
    constexpr int kThreads = 4, kSteps = 300;
    gcu_stream s;
    REQUIRE(gcu_stream_create(&s) == GCU_SUCCESS);
    long counter = 0;
    std::vector<std::vector<int>> logs(kThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; t++)
        threads.emplace_back([&, t] {
            for (int i = 0; i < kSteps; i++) {
                CountArgs a{&counter, &logs[t], i};
                gcu_launch(count, &a, sizeof a, s);
                if (i % 3 == 0) gcu_launch(count, &a, sizeof a, s);
                if (i % 2 == 0) gcu_stream_synchronize(s);
            }
            gcu_stream_synchronize(s);
        });
    for (auto &th : threads) th.join();
    REQUIRE(gcu_stream_synchronize(s) == GCU_SUCCESS);
    CHECK(counter == kThreads * (kSteps + (kSteps + 2) / 3));
    for (const auto &log : logs) {
        REQUIRE(log.size() == static_cast<size_t>(kSteps + (kSteps + 2) / 3));
        CHECK(std::is_sorted(log.begin(), log.end()));
    }
    REQUIRE(gcu_stream_destroy(s) == GCU_SUCCESS);
}

TEST_CASE("gcu: work nobody synchronizes on still runs, on the stream's worker", "[gcu]")
{
    gcu_stream s;
    REQUIRE(gcu_stream_create(&s) == GCU_SUCCESS);
    std::atomic<int> flag{0};
    SleepArgs args{&flag, 0, 5};
    REQUIRE(gcu_launch(sleep_then_set, &args, sizeof args, s) == GCU_SUCCESS);
    auto t0 = std::chrono::steady_clock::now();
    while (flag.load() == 0 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10))
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    CHECK(flag.load() == 5);
    while (gcu_stream_query(s) != GCU_SUCCESS) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    REQUIRE(gcu_stream_destroy(s) == GCU_SUCCESS);
}

namespace {
struct WhoArgs {
    std::thread::id *ran_on;
};

void note_thread(void *p) { *static_cast<WhoArgs *>(p)->ran_on = std::this_thread::get_id(); }
}  // namespace

TEST_CASE("gcu: a thread synchronizing soon after queueing runs the work itself; waiting on an event does not",
          "[gcu]")
{
    // The synchronizing thread runs a queue the worker has not started (GCU_HOST_LAZY_US, default 1 ms): kernels
    // then use the caller's OpenMP pool, not a second one (see gcu_host.c). A preempted caller may miss the
    // window now and then, so one of five tries must show it.
    gcu_stream s;
    REQUIRE(gcu_stream_create(&s) == GCU_SUCCESS);
    int on_caller = 0;
    for (int attempt = 0; attempt < 5; attempt++) {
        std::thread::id ran_on;
        WhoArgs args{&ran_on};
        REQUIRE(gcu_launch(note_thread, &args, sizeof args, s) == GCU_SUCCESS);
        REQUIRE(gcu_stream_synchronize(s) == GCU_SUCCESS);
        on_caller += ran_on == std::this_thread::get_id();
    }
    CHECK(on_caller > 0);
    // an event synchronize only waits: the stream's worker is started at once and runs it
    gcu_event e;
    REQUIRE(gcu_event_create(&e) == GCU_SUCCESS);
    std::thread::id ran_on;
    WhoArgs args{&ran_on};
    REQUIRE(gcu_launch(note_thread, &args, sizeof args, s) == GCU_SUCCESS);
    REQUIRE(gcu_event_record(e, s) == GCU_SUCCESS);
    REQUIRE(gcu_event_synchronize(e) == GCU_SUCCESS);
    CHECK(ran_on != std::thread::id());
    CHECK(ran_on != std::this_thread::get_id());
    REQUIRE(gcu_event_destroy(e) == GCU_SUCCESS);
    REQUIRE(gcu_stream_destroy(s) == GCU_SUCCESS);
}

TEST_CASE("gcu: waiting on an event starts an idle stream's worker at once", "[gcu]")
{
    // An idle worker looks at its queue once a second; a waiter kicks it. Without the kick this takes ~1 s.
    gcu_stream s;
    gcu_event e;
    REQUIRE(gcu_stream_create(&s) == GCU_SUCCESS);
    REQUIRE(gcu_event_create(&e) == GCU_SUCCESS);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the worker is in its idle wait
    std::thread::id ran_on;
    WhoArgs args{&ran_on};
    auto t0 = std::chrono::steady_clock::now();
    REQUIRE(gcu_launch(note_thread, &args, sizeof args, s) == GCU_SUCCESS);
    REQUIRE(gcu_event_record(e, s) == GCU_SUCCESS);
    REQUIRE(gcu_event_synchronize(e) == GCU_SUCCESS);
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(500));
    CHECK(ran_on != std::this_thread::get_id());
    REQUIRE(gcu_event_destroy(e) == GCU_SUCCESS);
    REQUIRE(gcu_stream_destroy(s) == GCU_SUCCESS);
}
