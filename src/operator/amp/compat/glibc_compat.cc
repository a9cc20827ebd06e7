/*!
 * \file glibc_compat.cc
 * \brief Portable builds (MXNET_AMP_PORTABLE): what lets libraries linked here load with an older glibc.
 *
 * The portable libraries link libstdc++ statically. That archive was compiled against the build machine's glibc,
 * so it refers to symbols that older glibc versions lack or define under an older version (pthread_once@GLIBC_2.34
 * is pthread_once@GLIBC_2.2.5 before 2.34). The functions below satisfy those references inside each library
 * (hidden: never exported, nothing else in the process binds to them): the ones older glibc versions have call
 * the old symbol version, the others are reimplemented on what every glibc since 2.2.5 has. No system header
 * is included, so no declaration with another visibility clashes with these definitions.
 *
 * So the libraries need glibc 2.17, as MXNet's own wheel does.
 */
#include <cstddef>
#include <cstdint>

#define AMP_COMPAT extern "C" __attribute__((visibility("hidden")))

// A function of glibc before `version`: amp_old_<name> is bound to name@version, and amp_new_<name>, whose symbol
// is `name` (an assembler name: no clash with the compiler's built-in declaration of it), calls it.
#define AMP_OLD(ret, name, params, args, version)                    \
  extern "C" ret amp_old_##name params;                              \
  __asm__(".symver amp_old_" #name "," #name "@" version);           \
  AMP_COMPAT ret amp_new_##name params __asm__(#name);               \
  ret amp_new_##name params { return amp_old_##name args; }

AMP_OLD(int, pthread_once, (int* once, void (*init)(void)), (once, init), "GLIBC_2.2.5")
AMP_OLD(int, __pthread_key_create, (unsigned* key, void (*destroy)(void*)), (key, destroy), "GLIBC_2.2.5")
AMP_OLD(void*, dlopen, (const char* file, int mode), (file, mode), "GLIBC_2.2.5")
AMP_OLD(void*, dlsym, (void* handle, const char* name), (handle, name), "GLIBC_2.2.5")
AMP_OLD(int, dlclose, (void* handle), (handle), "GLIBC_2.2.5")
AMP_OLD(char*, dlerror, (void), (), "GLIBC_2.2.5")
AMP_OLD(int, dladdr, (const void* address, void* info), (address, info), "GLIBC_2.2.5")
AMP_OLD(float, logf, (float x), (x), "GLIBC_2.2.5")
AMP_OLD(void*, dlmopen, (long lmid, const char* file, int mode), (lmid, file, mode), "GLIBC_2.3.4")  // NOLINT
AMP_OLD(void*, dlvsym, (void* handle, const char* name, const char* version), (handle, name, version), "GLIBC_2.2.5")

// What the CUDA runtime (linked statically into CUDA builds) calls: libpthread's and librt's before glibc 2.34.
// Handles, attributes and locks are passed as the pointers (or pthread_t / pthread_key_t integers) they are.
typedef unsigned long amp_thread_t;  // NOLINT(runtime/int): pthread_t
AMP_OLD(int, pthread_create, (void* thread, const void* attr, void* (*start)(void*), void* arg),
        (thread, attr, start, arg), "GLIBC_2.2.5")
AMP_OLD(int, pthread_join, (amp_thread_t thread, void** result), (thread, result), "GLIBC_2.2.5")
AMP_OLD(int, pthread_detach, (amp_thread_t thread), (thread), "GLIBC_2.2.5")
AMP_OLD(int, pthread_kill, (amp_thread_t thread, int sig), (thread, sig), "GLIBC_2.2.5")
AMP_OLD(int, pthread_key_create, (unsigned* key, void (*destroy)(void*)), (key, destroy), "GLIBC_2.2.5")
AMP_OLD(int, pthread_key_delete, (unsigned key), (key), "GLIBC_2.2.5")
AMP_OLD(void*, pthread_getspecific, (unsigned key), (key), "GLIBC_2.2.5")
AMP_OLD(int, pthread_setspecific, (unsigned key, const void* value), (key, value), "GLIBC_2.2.5")
AMP_OLD(int, pthread_mutex_trylock, (void* mutex), (mutex), "GLIBC_2.2.5")
AMP_OLD(int, pthread_mutexattr_init, (void* attr), (attr), "GLIBC_2.2.5")
AMP_OLD(int, pthread_mutexattr_destroy, (void* attr), (attr), "GLIBC_2.2.5")
AMP_OLD(int, pthread_mutexattr_settype, (void* attr, int kind), (attr, kind), "GLIBC_2.2.5")
AMP_OLD(int, pthread_mutexattr_setpshared, (void* attr, int shared), (attr, shared), "GLIBC_2.2.5")
AMP_OLD(int, pthread_condattr_setpshared, (void* attr, int shared), (attr, shared), "GLIBC_2.2.5")
AMP_OLD(int, pthread_rwlock_init, (void* lock, const void* attr), (lock, attr), "GLIBC_2.2.5")
AMP_OLD(int, pthread_rwlock_destroy, (void* lock), (lock), "GLIBC_2.2.5")
AMP_OLD(int, pthread_rwlock_rdlock, (void* lock), (lock), "GLIBC_2.2.5")
AMP_OLD(int, pthread_rwlock_wrlock, (void* lock), (lock), "GLIBC_2.2.5")
AMP_OLD(int, pthread_rwlock_tryrdlock, (void* lock), (lock), "GLIBC_2.2.5")
AMP_OLD(int, pthread_rwlock_trywrlock, (void* lock), (lock), "GLIBC_2.2.5")
AMP_OLD(int, pthread_rwlock_unlock, (void* lock), (lock), "GLIBC_2.2.5")
AMP_OLD(int, pthread_rwlock_timedrdlock, (void* lock, const void* abstime), (lock, abstime), "GLIBC_2.2.5")
AMP_OLD(int, pthread_rwlock_timedwrlock, (void* lock, const void* abstime), (lock, abstime), "GLIBC_2.2.5")
AMP_OLD(int, pthread_rwlockattr_init, (void* attr), (attr), "GLIBC_2.2.5")
AMP_OLD(int, pthread_rwlockattr_destroy, (void* attr), (attr), "GLIBC_2.2.5")
AMP_OLD(int, pthread_rwlockattr_setpshared, (void* attr, int shared), (attr, shared), "GLIBC_2.2.5")
AMP_OLD(int, pthread_spin_init, (void* lock, int shared), (lock, shared), "GLIBC_2.2.5")
AMP_OLD(int, pthread_spin_destroy, (void* lock), (lock), "GLIBC_2.2.5")
AMP_OLD(int, pthread_spin_lock, (void* lock), (lock), "GLIBC_2.2.5")
AMP_OLD(int, pthread_spin_trylock, (void* lock), (lock), "GLIBC_2.2.5")
AMP_OLD(int, pthread_spin_unlock, (void* lock), (lock), "GLIBC_2.2.5")
AMP_OLD(int, sem_init, (void* sem, int shared, unsigned value), (sem, shared, value), "GLIBC_2.2.5")
AMP_OLD(int, sem_destroy, (void* sem), (sem), "GLIBC_2.2.5")
AMP_OLD(int, sem_wait, (void* sem), (sem), "GLIBC_2.2.5")
AMP_OLD(int, sem_trywait, (void* sem), (sem), "GLIBC_2.2.5")
AMP_OLD(int, sem_timedwait, (void* sem, const void* abstime), (sem, abstime), "GLIBC_2.2.5")
AMP_OLD(int, sem_post, (void* sem), (sem), "GLIBC_2.2.5")
AMP_OLD(int, shm_open, (const char* name, int flags, unsigned mode), (name, flags, mode), "GLIBC_2.2.5")
AMP_OLD(int, shm_unlink, (const char* name), (name), "GLIBC_2.2.5")
AMP_OLD(int, __fxstat64, (int version, int fd, void* buf), (version, fd, buf), "GLIBC_2.2.5")

// GLIBC_2.32: libstdc++ skips atomic reference counting where it is set; 0 keeps the atomics, always correct.
extern "C" {
__attribute__((visibility("hidden"))) char __libc_single_threaded = 0;
}

// GLIBC_2.33 made fstat64 a function; before, it was __fxstat64 with the kernel's stat layout (1 on x86-64).
AMP_COMPAT int fstat64(int fd, void* buf) { return amp_old___fxstat64(1, fd, buf); }

extern "C" long syscall(long number, ...);  // NOLINT(runtime/int): glibc's own declaration

// GLIBC_2.25: the getrandom system call (318 on x86-64), which std::random_device reads.
AMP_COMPAT int getentropy(void* buffer, std::size_t length) {
  if (length > 256) return -1;
  std::size_t done = 0;
  while (done < length) {
    const long got = syscall(318, static_cast<char*>(buffer) + done, length - done, 0);  // NOLINT(runtime/int)
    if (got <= 0) return -1;
    done += static_cast<std::size_t>(got);
  }
  return 0;
}

// GLIBC_2.36: std::random_device's default source.
AMP_COMPAT std::uint32_t arc4random(void) {
  std::uint32_t value = 0;
  while (getentropy(&value, sizeof(value)) != 0) {
  }
  return value;
}

// GLIBC_2.18: the static libstdc++ registers each thread_local object's destructor here. The calling thread's
// list runs, last registered first, when the thread exits (a pthread key's destructor, which runs again when a
// destructor registers more). The main thread's objects are not destroyed at exit; this library is never unloaded.
extern "C" void* malloc(std::size_t size);
extern "C" void free(void* pointer);

namespace {

struct ThreadExit {
  void (*destroy)(void*);
  void* object;
  ThreadExit* next;
};

int g_exit_once = 0;  // pthread_once_t
unsigned g_exit_key = 0;

void run_thread_exits(void* head) {
  for (ThreadExit* e = static_cast<ThreadExit*>(head); e != nullptr;) {
    ThreadExit* next = e->next;
    e->destroy(e->object);
    free(e);
    e = next;
  }
}

void make_exit_key() { amp_new___pthread_key_create(&g_exit_key, run_thread_exits); }

}  // namespace

AMP_COMPAT int __cxa_thread_atexit_impl(void (*destroy)(void*), void* object, void* dso_handle) {
  amp_new_pthread_once(&g_exit_once, make_exit_key);
  ThreadExit* e = static_cast<ThreadExit*>(malloc(sizeof(ThreadExit)));
  if (e == nullptr) return -1;
  *e = {destroy, object, static_cast<ThreadExit*>(amp_new_pthread_getspecific(g_exit_key))};
  return amp_new_pthread_setspecific(g_exit_key, e);
}
