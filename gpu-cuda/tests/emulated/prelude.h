// Just enough of CUDA for the kernels to run on the CPU: thread and block indices per thread,
// __shared__ as a function static (one block runs at a time), __syncthreads as a barrier, and
// atomicAdd through std::atomic_ref. launch(grid, body) runs body on grid x 256 threads,
// launch_threads(grid, threads, body) on grid x threads.
#pragma once
#include <cmath>
#include <cstring>
#include <cstdio>
#include <barrier>
#include <thread>
#include <vector>
#include <atomic>
#include <functional>
struct dim3_ { unsigned x = 0, y = 0, z = 0; };
thread_local dim3_ blockIdx, threadIdx;
dim3_ blockDim, gridDim;
std::barrier<> *g_bar;
#define __global__
#define __grid_constant__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(n)
#define __shared__ static
inline void __syncthreads() { g_bar->arrive_and_wait(); }
inline float __int_as_float(int v) { float f; memcpy(&f, &v, 4); return f; }
inline double __longlong_as_double(unsigned long long v) { double f; memcpy(&f, &v, 8); return f; }
template <typename T> T atomicAdd(T *p, T v) { return std::atomic_ref<T>(*p).fetch_add(v); }
using std::exp; using std::log; using std::sqrt; using std::tanh; using std::erf; using std::sin; using std::cos;
using std::floor; using std::ceil; using std::rint; using std::trunc;
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
inline void launch_threads(unsigned grid, unsigned threads, std::function<void()> body) {
  blockDim.x = threads; gridDim.x = grid;
  for (unsigned b = 0; b < grid; ++b) {
    std::barrier<> bar(threads); g_bar = &bar;
    std::vector<std::thread> ts;
    for (unsigned t = 0; t < threads; ++t) ts.emplace_back([=] { blockIdx.x = b; threadIdx.x = t; body(); });
    for (auto &t : ts) t.join();
  }
}
inline void launch(unsigned grid, std::function<void()> body) { launch_threads(grid, 256, body); }
