// A fake libnvidia-ml for tests on machines without a GPU: exports the NVML entry points ftune
// resolves (cuda/nvml.cc) with NVML's C ABI and answers from a script the test sets through the
// fake_nvml_* functions (the test dlopens the same file, so it shares this state). Two devices,
// whose NVML order differs from their bus-id order, so index vs bus-id lookups are told apart.
#include <cstring>

namespace {

struct Utilization {
  unsigned gpu, memory;
};
struct Memory {
  unsigned long long total, free, used;
};
struct FakeDevice {
  const char* bus_id;
  const char* name;
};

constexpr int kSuccess = 0, kInvalidArgument = 2, kNotSupported = 3, kNotFound = 6,
              kUninitialized = 1, kDriverNotLoaded = 9;
constexpr unsigned long long kTotal = 80ull << 30;
constexpr int kMaxScript = 64;

FakeDevice g_devices[2] = {{"00000000:65:00.0", "Fake GPU at 65"},
                           {"00000000:17:00.0", "Fake GPU at 17"}};
int g_init_rc = kSuccess;
int g_initialised = 0, g_init_calls = 0, g_shutdown_calls = 0;
bool g_power_supported = true;
int g_n = 1, g_calls = 0;
unsigned g_util[kMaxScript] = {50};
unsigned long long g_used[kMaxScript] = {1ull << 30};
unsigned g_power_mw[kMaxScript] = {100000};
unsigned g_temp[kMaxScript] = {40};

int device_index(void* handle) {
  for (int i = 0; i < 2; ++i)
    if (handle == &g_devices[i]) return i;
  return -1;
}

}  // namespace

extern "C" {

// --- control, for the tests -------------------------------------------------------------------
void fake_nvml_reset(int init_rc, bool power_supported) {
  g_init_rc = init_rc;
  g_power_supported = power_supported;
  g_initialised = g_init_calls = g_shutdown_calls = g_calls = 0;
  g_n = 1;
  g_util[0] = 50;
  g_used[0] = 1ull << 30;
  g_power_mw[0] = 100000;
  g_temp[0] = 40;
}
// Sample k (utilisation calls so far) answers entry k % n of each array.
void fake_nvml_script(int n, const unsigned* util, const unsigned long long* used,
                      const unsigned* power_mw, const unsigned* temp) {
  g_n = n < 1 ? 1 : n > kMaxScript ? kMaxScript : n;
  for (int i = 0; i < g_n; ++i) {
    g_util[i] = util[i];
    g_used[i] = used[i];
    g_power_mw[i] = power_mw[i];
    g_temp[i] = temp[i];
  }
  g_calls = 0;
}
int fake_nvml_init_calls() {
  return g_init_calls;
}
int fake_nvml_shutdown_calls() {
  return g_shutdown_calls;
}
int fake_nvml_samples_taken() {
  return g_calls;
}

// --- NVML ---------------------------------------------------------------------------------------
int nvmlInit_v2() {
  ++g_init_calls;
  if (g_init_rc != kSuccess) return g_init_rc;
  ++g_initialised;
  return kSuccess;
}
int nvmlShutdown() {
  ++g_shutdown_calls;
  if (g_initialised == 0) return kUninitialized;
  --g_initialised;
  return kSuccess;
}
const char* nvmlErrorString(int rc) {
  switch (rc) {
    case kSuccess:
      return "Success";
    case kUninitialized:
      return "Uninitialized";
    case kInvalidArgument:
      return "Invalid Argument";
    case kNotSupported:
      return "Not Supported";
    case kNotFound:
      return "Not Found";
    case kDriverNotLoaded:
      return "Driver Not Loaded";
    default:
      return "Unknown Error";
  }
}
int nvmlSystemGetDriverVersion(char* version, unsigned length) {
  if (!g_initialised) return kUninitialized;
  std::strncpy(version, "580.65.06", length);
  return kSuccess;
}
int nvmlDeviceGetHandleByIndex_v2(unsigned index, void** device) {
  if (!g_initialised) return kUninitialized;
  if (index >= 2) return kInvalidArgument;
  *device = &g_devices[index];
  return kSuccess;
}
int nvmlDeviceGetHandleByPciBusId_v2(const char* bus_id, void** device) {
  if (!g_initialised) return kUninitialized;
  for (FakeDevice& d : g_devices)
    if (std::strcmp(d.bus_id, bus_id) == 0) {
      *device = &d;
      return kSuccess;
    }
  return kNotFound;
}
int nvmlDeviceGetName(void* device, char* name, unsigned length) {
  const int i = device_index(device);
  if (i < 0) return kInvalidArgument;
  std::strncpy(name, g_devices[i].name, length);
  return kSuccess;
}
int nvmlDeviceGetUtilizationRates(void* device, Utilization* u) {
  if (device_index(device) < 0) return kInvalidArgument;
  const int k = g_calls++ % g_n;
  u->gpu = g_util[k];
  u->memory = g_util[k] / 2;
  return kSuccess;
}
int nvmlDeviceGetMemoryInfo(void* device, Memory* m) {
  if (device_index(device) < 0) return kInvalidArgument;
  const int k = (g_calls + g_n - 1) % g_n;  // the sample the utilisation call just opened
  m->total = kTotal;
  m->used = g_used[k];
  m->free = kTotal - g_used[k];
  return kSuccess;
}
int nvmlDeviceGetPowerUsage(void* device, unsigned* milliwatts) {
  if (device_index(device) < 0) return kInvalidArgument;
  if (!g_power_supported) return kNotSupported;
  *milliwatts = g_power_mw[(g_calls + g_n - 1) % g_n];
  return kSuccess;
}
int nvmlDeviceGetTemperature(void* device, unsigned sensor, unsigned* celsius) {
  if (device_index(device) < 0 || sensor != 0) return kInvalidArgument;
  *celsius = g_temp[(g_calls + g_n - 1) % g_n];
  return kSuccess;
}
int nvmlDeviceGetClockInfo(void* device, unsigned type, unsigned* mhz) {
  if (device_index(device) < 0 || type > 3) return kInvalidArgument;
  *mhz = 1755;
  return kSuccess;
}
int nvmlDeviceGetMaxClockInfo(void* device, unsigned type, unsigned* mhz) {
  if (device_index(device) < 0 || type > 3) return kInvalidArgument;
  *mhz = 1980;
  return kSuccess;
}

}  // extern "C"
