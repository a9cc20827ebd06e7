/*
 * A stand-in for the NVIDIA driver library (libcuda.so.1) for CPU-only machines: libmxnet.so of the
 * mxnet-cu1xx wheels imports these ten functions from it, and each answers CUDA_ERROR_NO_DEVICE (100). MXNet
 * then imports with CUDA enabled and sees 0 GPUs, as on a GPU host with CUDA_VISIBLE_DEVICES="".
 * Built by tools/gpu_wheel_tier.sh: cc -shared -fPIC -Wl,-soname,libcuda.so.1 -o libcuda.so.1 cuda_stub.c
 */
#define CUDA_ERROR_NO_DEVICE 100
#define NO_DEVICE(name) \
  int name(void) { return CUDA_ERROR_NO_DEVICE; }

NO_DEVICE(cuDeviceGet)
NO_DEVICE(cuDevicePrimaryCtxRetain)
NO_DEVICE(cuGraphKernelNodeGetParams)
NO_DEVICE(cuGraphNodeGetType)
NO_DEVICE(cuLaunchKernel)
NO_DEVICE(cuModuleGetFunction)
NO_DEVICE(cuModuleLoadData)
NO_DEVICE(cuModuleLoadDataEx)
NO_DEVICE(cuModuleUnload)

int cuGetErrorString(int error, const char** text) {
  *text = error == CUDA_ERROR_NO_DEVICE ? "no CUDA-capable device is detected (stand-in driver)"
                                        : "unknown error (stand-in driver)";
  return 0;
}
