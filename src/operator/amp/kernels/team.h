/*!
 * \file team.h
 * \brief The OpenMP team of one library call, shared by the oneDNN 3 kernels (onednn/common.h) and the
 *        library's own parallel kernels (BatchNorm): plain C++ and OpenMP, no MXNet or oneDNN headers.
 *
 * A call runs with MXNET_AMP_ONEDNN_THREADS threads if set, else OMP_NUM_THREADS, else the cores divided among
 * the library calls running when it starts (MXNET_CPU_WORKER_NTHREADS engine workers may run several at once):
 * busy workers share the cores, and a worker alone gets them all. Each shared library counts its own calls.
 */
#ifndef MXNET_AMP_KERNELS_TEAM_H_
#define MXNET_AMP_KERNELS_TEAM_H_

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>

namespace mxnet_amp {

/*! \brief A positive integer from the environment variable \p name, or 0. */
inline int env_threads(const char* name) {
  const char* env = std::getenv(name);
  const int n = env != nullptr ? std::atoi(env) : 0;
  return n > 0 ? n : 0;
}

/*! \brief The cores the library's calls share: MXNET_AMP_ONEDNN_THREADS, else OMP_NUM_THREADS, else every core. */
inline int total_threads() {
  static const int threads = [] {
    const int own = env_threads("MXNET_AMP_ONEDNN_THREADS");
    const int omp = env_threads("OMP_NUM_THREADS");
    return own > 0 ? own : omp > 0 ? omp : std::max(1, omp_get_num_procs());
  }();
  return threads;
}

/*! \brief Whether the team size was fixed by MXNET_AMP_ONEDNN_THREADS or OMP_NUM_THREADS (never divided). */
inline bool fixed_team() {
  static const bool fixed = env_threads("MXNET_AMP_ONEDNN_THREADS") > 0 || env_threads("OMP_NUM_THREADS") > 0;
  return fixed;
}

/*! \brief The library calls running now, in all of MXNet's engine workers. */
inline std::atomic<int>& running_calls() {
  static std::atomic<int> running{0};
  return running;
}

/*!
 * \brief The OpenMP team of a call starting now: total_threads(), divided among the calls running (this one
 *        included) unless the team was fixed, at least 1.
 */
inline int team_threads(int running) {
  return fixed_team() ? total_threads() : std::max(1, total_threads() / std::max(1, running));
}

/*! \brief Sets the calling thread's OpenMP team size for its lifetime, then restores it. */
class TeamSize {
 public:
  explicit TeamSize(int threads) : saved_(omp_get_max_threads()), set_(threads != saved_) {
    if (set_) omp_set_num_threads(threads);
  }
  ~TeamSize() {
    if (set_) omp_set_num_threads(saved_);
  }
  TeamSize(const TeamSize&) = delete;
  TeamSize& operator=(const TeamSize&) = delete;

 private:
  int saved_;
  bool set_;
};

/*!
 * \brief One library call, counted in running_calls() while it lives, with its OpenMP team set (for oneDNN,
 *        before its primitive is created or looked up: oneDNN splits work by the team size it is created with).
 */
class CallTeam {
 public:
  CallTeam() : running_(++running_calls()), threads_(team_threads(running_)), team_(threads_) {}
  ~CallTeam() { --running_calls(); }
  CallTeam(const CallTeam&) = delete;
  CallTeam& operator=(const CallTeam&) = delete;

  /*! \brief This call's team size. */
  int threads() const { return threads_; }

 private:
  int running_;
  int threads_;
  TeamSize team_;
};

}  // namespace mxnet_amp

#endif  // MXNET_AMP_KERNELS_TEAM_H_
