#include "kernels/cpu_features.h"

#include <cpuid.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "kernels/cpu/bf16_probe_avx512.h"

namespace encoderd::kernels {
namespace {

uint64_t ReadXcr0() {
  uint32_t eax, edx;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<uint64_t>(edx) << 32) | eax;
}

CpuFeatures DetectFeatures() {
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

std::string_view Bf16Choice() {
  const char* env = std::getenv(kCpuBf16Env);
  return env == nullptr ? std::string_view() : std::string_view(env);
}

// The features in use, and the bf16 dot product's rates where they were
// measured (avx512_bf16 left on by ENCODERD_CPU_DISABLE, ENCODERD_CPU_BF16
// not `native`).
struct Choice {
  CpuFeatures features;
  bool bf16_measured = false;
  Bf16DotRates bf16_rates;
};

const Choice& Chosen() {
  static const Choice choice = [] {
    Choice c;
    c.features = DisableCpuFeatures(DetectFeatures(), DisableList(), nullptr);
    if (c.features.avx512_bf16 && Bf16Choice() != "native") {
      c.bf16_measured = true;
      c.bf16_rates = MeasureBf16DotRatesAvx512();
      c.features.avx512_bf16 = NativeBf16Pays(c.bf16_rates);
    }
    return c;
  }();
  return choice;
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

bool NativeBf16Pays(const Bf16DotRates& rates) {
  return rates.native_gmacs >= kNativeBf16MinShare * rates.fma_gmacs;
}

CpuFeatures DetectCpuFeatures() { return DetectFeatures(); }

const CpuFeatures& GetCpuFeatures() { return Chosen().features; }

const Bf16DotRates* MeasuredBf16DotRates() {
  const Choice& c = Chosen();
  return c.bf16_measured ? &c.bf16_rates : nullptr;
}

std::string DescribeCpuFeatures() {
  const CpuFeatures detected = DetectFeatures();
  std::string unknown;
  const CpuFeatures allowed = DisableCpuFeatures(detected, DisableList(), &unknown);
  const Choice& chosen = Chosen();
  std::string in_use, off;
  for (const auto& [name, member] : kFeatures) {
    if (!(allowed.*member) && !(detected.*member)) continue;
    if (allowed.*member && !(chosen.features.*member)) continue;  // the bf16 choice, below
    std::string& list = allowed.*member ? in_use : off;
    list += list.empty() ? "" : " ";
    list += name;
  }
  std::string line = "CPU features: " + (in_use.empty() ? std::string("none") : in_use);
  if (!off.empty()) line += std::string("; turned off by ") + kCpuDisableEnv + ": " + off;
  if (chosen.bf16_measured) {
    char rates[160];
    std::snprintf(rates, sizeof rates, "%.1f GMAC/s against fp32 FMA's %.1f",
                  chosen.bf16_rates.native_gmacs, chosen.bf16_rates.fma_gmacs);
    line += std::string("; avx512_bf16 ") +
            (chosen.features.avx512_bf16 ? "used: its dot product made "
                                         : "not used: its dot product made only ") +
            rates + " (" + kCpuBf16Env + "=native " +
            (chosen.features.avx512_bf16 ? "skips the measurement)" : "uses it)");
  }
  const std::string_view bf16 = Bf16Choice();
  if (!bf16.empty() && bf16 != "auto" && bf16 != "native") {
    line += std::string("; ") + kCpuBf16Env + " is neither auto nor native: " + std::string(bf16);
  }
  if (!unknown.empty())
    line += std::string("; ") + kCpuDisableEnv + " names no feature: " + unknown;
  return line;
}

}  // namespace encoderd::kernels
