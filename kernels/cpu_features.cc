#include "kernels/cpu_features.h"

#include <cpuid.h>

#include <cstdint>
#include <cstdlib>
#include <utility>

namespace encoderd::kernels {
namespace {

uint64_t ReadXcr0() {
  uint32_t eax, edx;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<uint64_t>(edx) << 32) | eax;
}

CpuFeatures Detect() {
  CpuFeatures f;
  unsigned eax, ebx, ecx, edx;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return f;
  const bool osxsave = ecx & bit_OSXSAVE;
  if (!osxsave) return f;
  const uint64_t xcr0 = ReadXcr0();
  const bool ymm_state = (xcr0 & 0x6) == 0x6;
  const bool zmm_state = (xcr0 & 0xe6) == 0xe6;
  f.fma = ymm_state && (ecx & bit_FMA);
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) {
    f.avx2 = ymm_state && (ebx & bit_AVX2);
    f.avx512f = zmm_state && (ebx & bit_AVX512F);
    f.avx512bw = zmm_state && (ebx & bit_AVX512BW);
    f.avx512_vnni = zmm_state && (ecx & bit_AVX512VNNI);
  }
  if (__get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx)) {
    f.avx512_bf16 = zmm_state && (eax & bit_AVX512BF16);
  }
  return f;
}

// Every feature by name, in the order logs list them.
const std::pair<const char*, bool CpuFeatures::*> kFeatures[] = {
    {"avx2", &CpuFeatures::avx2},
    {"fma", &CpuFeatures::fma},
    {"avx512f", &CpuFeatures::avx512f},
    {"avx512bw", &CpuFeatures::avx512bw},
    {"avx512_bf16", &CpuFeatures::avx512_bf16},
    {"avx512_vnni", &CpuFeatures::avx512_vnni},
};

std::string_view DisableList() {
  const char* env = std::getenv(kCpuDisableEnv);
  return env == nullptr ? std::string_view() : std::string_view(env);
}

}  // namespace

CpuFeatures DisableCpuFeatures(CpuFeatures detected, std::string_view disable,
                               std::string* unknown) {
  while (!disable.empty()) {
    const size_t comma = disable.find(',');
    const std::string_view name = disable.substr(0, comma);
    disable = comma == std::string_view::npos ? std::string_view() : disable.substr(comma + 1);
    if (name.empty()) continue;
    bool known = false;
    for (const auto& [feature, member] : kFeatures) {
      if (name == feature) {
        detected.*member = false;
        known = true;
      }
    }
    if (!known && unknown != nullptr) {
      if (!unknown->empty()) *unknown += ",";
      *unknown += name;
    }
  }
  // What no real CPU has: AVX-512 without AVX2 and FMA, its extensions
  // without AVX-512F, BF16 without BW. A feature turned off takes those that
  // build on it along, so that every kernel's check of its own flags sees a
  // CPU that exists (with avx512f off alone, the bf16 GEMMs, which check
  // avx512_bf16 and avx512bw, still ran AVX-512 code).
  detected.avx512f = detected.avx512f && detected.avx2 && detected.fma;
  detected.avx512bw = detected.avx512bw && detected.avx512f;
  detected.avx512_vnni = detected.avx512_vnni && detected.avx512f;
  detected.avx512_bf16 = detected.avx512_bf16 && detected.avx512bw;
  return detected;
}

const CpuFeatures& GetCpuFeatures() {
  static const CpuFeatures features = DisableCpuFeatures(Detect(), DisableList(), nullptr);
  return features;
}

std::string DescribeCpuFeatures() {
  const CpuFeatures detected = Detect();
  const CpuFeatures& used = GetCpuFeatures();
  std::string in_use, off;
  for (const auto& [name, member] : kFeatures) {
    std::string& list = used.*member ? in_use : off;
    if (!(used.*member) && !(detected.*member)) continue;
    list += list.empty() ? "" : " ";
    list += name;
  }
  std::string line = "CPU features: " + (in_use.empty() ? std::string("none") : in_use);
  if (!off.empty()) line += std::string("; turned off by ") + kCpuDisableEnv + ": " + off;
  std::string unknown;
  DisableCpuFeatures(detected, DisableList(), &unknown);
  if (!unknown.empty())
    line += std::string("; ") + kCpuDisableEnv + " names no feature: " + unknown;
  return line;
}

}  // namespace encoderd::kernels
