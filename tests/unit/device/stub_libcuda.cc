// A stand-in for the NVIDIA driver library (built as libcuda.so.1 in its own folder), for tests
// that must see whether a process initializes CUDA: a process run with LD_LIBRARY_PATH on that
// folder loads this instead of the driver. Every entry point appends its name and a newline to
// the file $GRANARY_STUB_LIBCUDA_LOG. cuPointerGetAttributes answers as the driver does before
// cuInit (CUDA_ERROR_NOT_INITIALIZED); every other call fails (CUDA_ERROR_NO_DEVICE), so a runtime
// that loads it finds no usable driver.

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace {

constexpr int kNotInitialized = 3;  // CUDA_ERROR_NOT_INITIALIZED
constexpr int kNoDevice = 100;      // CUDA_ERROR_NO_DEVICE

int Note(const char* name, int result) {
  const char* path = std::getenv("GRANARY_STUB_LIBCUDA_LOG");
  if (path == nullptr) return result;
  const int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) return result;
  (void)!write(fd, name, std::strlen(name));
  (void)!write(fd, "\n", 1);
  close(fd);
  return result;
}

}  // namespace

extern "C" {
int cuInit(unsigned) { return Note("cuInit", kNoDevice); }
int cuDriverGetVersion(int*) { return Note("cuDriverGetVersion", kNoDevice); }
int cuGetProcAddress(const char*, void**, int, unsigned long long) {  // NOLINT(runtime/int)
  return Note("cuGetProcAddress", kNoDevice);
}
int cuGetProcAddress_v2(const char*, void**, int, unsigned long long, void*) {  // NOLINT
  return Note("cuGetProcAddress_v2", kNoDevice);
}
int cuGetExportTable(const void**, const void*) { return Note("cuGetExportTable", kNoDevice); }
int cuDeviceGetCount(int*) { return Note("cuDeviceGetCount", kNoDevice); }
int cuPointerGetAttributes(unsigned, int*, void**, unsigned long long) {  // NOLINT(runtime/int)
  return Note("cuPointerGetAttributes", kNotInitialized);
}
}
