#include "kernels/cpu_features.h"

#include <cpuid.h>

#include <algorithm>
#include <chrono>
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

}  // namespace

CpuFeatures DetectCpuFeatures() {
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

bool DetectAmxBf16() {
  unsigned eax, ebx, ecx, edx;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || !(ecx & bit_OSXSAVE)) return false;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
  constexpr unsigned kAmxBf16 = 1u << 22, kAmxTile = 1u << 24;  // CPUID.(7,0):EDX
  constexpr uint64_t kTileState = (1ull << 17) | (1ull << 18);  // XTILECFG, XTILEDATA
  return (edx & kAmxBf16) && (edx & kAmxTile) && (ReadXcr0() & kTileState) == kTileState;
}

namespace {

// Seconds one call of loop(iterations) takes.
double SecondsOf(void (*loop)(int64_t), int64_t iterations) {
  const auto t0 = std::chrono::steady_clock::now();
  loop(iterations);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
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

Bf16DotRates MeasureBf16DotRates() {
  // 16 x 8192 instructions: 0.03-0.1 ms a loop on the CPUs measured. The two
  // loops take turns, so that a pause of the host hits one pass, not one
  // instruction; each keeps its fastest pass.
  constexpr int64_t kIterations = 8192;
  constexpr int kPasses = 7;
  SecondsOf(Bf16DotLoopAvx512, kIterations);  // warm-up: the core's wide units wake
  SecondsOf(FmaLoopAvx512, kIterations);
  double native = 1e30, fma = 1e30;
  for (int pass = 0; pass < kPasses; ++pass) {
    native = std::min(native, SecondsOf(Bf16DotLoopAvx512, kIterations));
    fma = std::min(fma, SecondsOf(FmaLoopAvx512, kIterations));
  }
  const double instructions = 16.0 * kIterations;
  Bf16DotRates rates;
  rates.native_gmacs = native > 0 ? instructions * 32 / native / 1e9 : 0;
  rates.fma_gmacs = fma > 0 ? instructions * 16 / fma / 1e9 : 0;
  return rates;
}

CpuChoice ChooseCpuFeatures(const CpuFeatures& detected, bool amx_bf16, std::string_view disable,
                            std::string_view bf16, Bf16DotRates (*measure)()) {
  CpuChoice c;
  c.features = DisableCpuFeatures(detected, disable, nullptr);
  if (!c.features.avx512_bf16) return c;
  if (bf16 == "native") {
    c.bf16_forced = true;
  } else if (amx_bf16) {
    c.amx_bf16 = true;
  } else {
    c.bf16_measured = true;
    c.bf16_rates = measure();
    c.features.avx512_bf16 = NativeBf16Pays(c.bf16_rates);
  }
  return c;
}

const CpuChoice& GetCpuChoice() {
  static const CpuChoice choice = ChooseCpuFeatures(
      DetectCpuFeatures(), DetectAmxBf16(), DisableList(), Bf16Choice(), MeasureBf16DotRates);
  return choice;
}

const CpuFeatures& GetCpuFeatures() { return GetCpuChoice().features; }

std::string DescribeCpuChoice(const CpuFeatures& detected, std::string_view disable,
                              std::string_view bf16, const CpuChoice& choice) {
  std::string unknown;
  const CpuFeatures allowed = DisableCpuFeatures(detected, disable, &unknown);
  std::string in_use, off;
  for (const auto& [name, member] : kFeatures) {
    if (!(allowed.*member) && !(detected.*member)) continue;
    if (allowed.*member && !(choice.features.*member)) continue;  // the bf16 choice, below
    std::string& list = allowed.*member ? in_use : off;
    list += list.empty() ? "" : " ";
    list += name;
  }
  std::string line = "CPU features: " + (in_use.empty() ? std::string("none") : in_use);
  if (!off.empty()) line += std::string("; turned off by ") + kCpuDisableEnv + ": " + off;
  if (!unknown.empty())
    line += std::string("; ") + kCpuDisableEnv + " names no feature: " + unknown;
  if (choice.bf16_forced) {
    line += std::string("; avx512_bf16 kept by ") + kCpuBf16Env + "=native (not measured)";
  } else if (choice.amx_bf16) {
    line += "; avx512_bf16 kept: the CPU has AMX-BF16 (not measured)";
  } else if (choice.bf16_measured) {
    char rates[96];
    std::snprintf(rates, sizeof rates, "%.1f GMAC/s against fp32 FMA's %.1f",
                  choice.bf16_rates.native_gmacs, choice.bf16_rates.fma_gmacs);
    line += choice.features.avx512_bf16
                ? std::string("; avx512_bf16 used: its dot product made ") + rates
                : std::string("; avx512_bf16 not used: its dot product made only ") + rates + " (" +
                      kCpuBf16Env + "=native uses it)";
  }
  if (!bf16.empty() && bf16 != "auto" && bf16 != "native") {
    line += std::string("; ") + kCpuBf16Env + " is neither auto nor native: " + std::string(bf16);
  }
  return line;
}

std::string DescribeCpuFeatures() {
  return DescribeCpuChoice(DetectCpuFeatures(), DisableList(), Bf16Choice(), GetCpuChoice());
}

}  // namespace encoderd::kernels
