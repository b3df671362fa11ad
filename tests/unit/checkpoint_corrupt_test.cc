// Damaged and hostile checkpoints: each must give a clear non-OK status that
// names the file, never a crash (run under ASan too).
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <random>

#include "engine/io/checkpoint_reader.h"
#include "engine/io/pickle_reader.h"
#include "engine/io/state_dict.h"
#include "tests/unit/checkpoint_test_util.h"

namespace encoderd {
namespace {

using namespace std::string_literals;

using testing::CheckpointPath;
using testing::ReadFileBytes;

StatusOr<Checkpoint> ReadBytes(std::vector<std::byte> bytes, const std::string& name) {
  return ReadCheckpointBytes(std::make_shared<OwnedStorage>(std::move(bytes)), name);
}

void ExpectNamedError(const StatusOr<Checkpoint>& r, const std::string& name) {
  ASSERT_FALSE(r.ok()) << name << " loaded";
  EXPECT_NE(r.status().message().find(name), std::string::npos) << r.status().ToString();
}

uint32_t Load32(const std::vector<std::byte>& b, size_t at) {
  uint32_t v;
  std::memcpy(&v, b.data() + at, 4);
  return v;
}
void Store32(std::vector<std::byte>* b, size_t at, uint32_t v) {
  std::memcpy(b->data() + at, &v, 4);
}

// Offset of the zip end-of-central-directory record.
size_t FindEocd(const std::vector<std::byte>& b) {
  for (size_t at = b.size() - 22;; --at) {
    if (Load32(b, at) == 0x06054b50) return at;
    if (at == 0) return std::string::npos;
  }
}

class CheckpointCorruptTest : public ::testing::TestWithParam<const char*> {};

TEST_P(CheckpointCorruptTest, TruncatedAnywhere) {
  const auto good = ReadFileBytes(CheckpointPath(GetParam()));
  ASSERT_GT(good.size(), 64u);
  for (size_t cut : {size_t{0}, size_t{1}, size_t{7}, size_t{9}, size_t{30}, good.size() / 4,
                     good.size() / 2, good.size() - 64, good.size() - 9, good.size() - 1}) {
    const std::string name = std::string(GetParam()) + "@" + std::to_string(cut);
    ExpectNamedError(ReadBytes({good.begin(), good.begin() + cut}, name), name);
  }
}

TEST_P(CheckpointCorruptTest, FlippedMagic) {
  auto bytes = ReadFileBytes(CheckpointPath(GetParam()));
  bytes[0] ^= std::byte{0xff};
  ExpectNamedError(ReadBytes(bytes, "flipped"), "flipped");
}

// Random byte flips: any outcome but a crash (or a success without tensors).
TEST_P(CheckpointCorruptTest, RandomFlipsNeverCrash) {
  const auto good = ReadFileBytes(CheckpointPath(GetParam()));
  std::mt19937 rng(42);
  int failures = 0;
  for (int iter = 0; iter < 300; ++iter) {
    auto bytes = good;
    for (int k = 0; k < 1 + iter % 4; ++k) {
      bytes[rng() % bytes.size()] = static_cast<std::byte>(rng());
    }
    auto r = ReadBytes(bytes, "flip");
    if (!r.ok()) {
      ++failures;
      EXPECT_NE(r.status().message().find("flip"), std::string::npos) << r.status().ToString();
    }
  }
  EXPECT_GT(failures, 0);
}

INSTANTIATE_TEST_SUITE_P(Checkpoint, CheckpointCorruptTest,
                         ::testing::Values("sd_zip.pt", "sd_legacy.pt", "sd.safetensors"));

// A clone without `git lfs pull` has a pointer file where the weights
// should be: said so, not "unrecognized checkpoint format" (until
// 2026-12-04).
TEST(CheckpointCorruptTest, AGitLfsPointerIsNamed) {
  const std::string pointer =
      "version https://git-lfs.github.com/spec/v1\n"
      "oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\n"
      "size 440473133\n";
  std::vector<std::byte> bytes(pointer.size());
  std::memcpy(bytes.data(), pointer.data(), pointer.size());
  const auto r = ReadBytes(std::move(bytes), "pytorch_model.bin");
  ExpectNamedError(r, "pytorch_model.bin");
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("Git LFS pointer"), std::string::npos)
      << r.status().ToString();
}

TEST(CheckpointCorruptZipTest, OffsetsAndCountsPastTheEnd) {
  const auto good = ReadFileBytes(CheckpointPath("sd_zip.pt"));
  const size_t eocd = FindEocd(good);
  ASSERT_NE(eocd, std::string::npos);
  const size_t cd = Load32(good, eocd + 16);

  auto bytes = good;  // first entry's local header far past the end
  Store32(&bytes, cd + 42, 0x7ffffff0);
  ExpectNamedError(ReadBytes(bytes, "zip-offset"), "zip-offset");

  bytes = good;  // central directory past the end
  Store32(&bytes, eocd + 16, static_cast<uint32_t>(good.size()));
  ExpectNamedError(ReadBytes(bytes, "zip-cd"), "zip-cd");

  bytes = good;  // a huge entry count
  bytes[eocd + 10] = bytes[eocd + 11] = std::byte{0xfe};
  ExpectNamedError(ReadBytes(bytes, "zip-count"), "zip-count");

  bytes = good;  // an entry claiming to be compressed
  bytes[cd + 10] = std::byte{8};
  auto r = ReadBytes(bytes, "zip-deflate");
  ExpectNamedError(r, "zip-deflate");
}

// A zip64 end record's offset was checked against size - 56 without checking
// that the file holds 56 bytes: in a shorter file that difference wrapped
// around and the record was read far past the end (found by checkpoint_fuzz;
// a heap-buffer-overflow under ASan).
TEST(CheckpointCorruptZipTest, Zip64LocatorInAFileShorterThanItsEndRecord) {
  std::vector<std::byte> bytes(4 + 20 + 22, std::byte{0});
  Store32(&bytes, 0, 0x04034b50);  // a local header's signature
  Store32(&bytes, 4, 0x07064b50);  // the zip64 locator, pointing at offset 1000
  Store32(&bytes, 4 + 8, 1000);
  Store32(&bytes, 24, 0x06054b50);  // the end record: a zip64 entry count
  bytes[24 + 10] = bytes[24 + 11] = std::byte{0xff};
  ExpectNamedError(ReadBytes(bytes, "zip64-short"), "zip64-short");
}

// Central-directory entries that point at one local header share its data:
// N entries over one region of D bytes made the CRC checks N x D bytes of
// work (10^4 entries over 1 GiB: 10 TB, hours) from a file of about D.
// Entries may not overlap.
TEST(CheckpointCorruptZipTest, EntriesThatShareTheirBytesAreRefused) {
  const auto good = ReadFileBytes(CheckpointPath("sd_zip.pt"));
  const size_t eocd = FindEocd(good);
  ASSERT_NE(eocd, std::string::npos);
  const size_t cd = Load32(good, eocd + 16);
  const auto name_at = [&](size_t pos) {
    const size_t len = static_cast<size_t>(good[pos + 28]) | static_cast<size_t>(good[pos + 29])
                                                                 << 8;
    return std::string(reinterpret_cast<const char*>(good.data() + pos + 46), len);
  };
  const auto next = [&](size_t pos) {
    const auto u16 = [&](size_t at) {
      return static_cast<size_t>(good[at]) | static_cast<size_t>(good[at + 1]) << 8;
    };
    return pos + 46 + u16(pos + 28) + u16(pos + 30) + u16(pos + 32);
  };
  const size_t first = cd, second = next(cd);
  ASSERT_EQ(Load32(good, second), 0x02014b50u);
  auto bytes = good;  // the second entry's local header is the first's
  Store32(&bytes, second + 42, Load32(good, first + 42));
  auto r = ReadBytes(bytes, "zip-shared");
  ExpectNamedError(r, "zip-shared");
  EXPECT_NE(r.status().message().find("overlap"), std::string::npos) << r.status().ToString();
  EXPECT_NE(r.status().message().find(name_at(first)), std::string::npos) << r.status().ToString();
}

// One flipped bit inside a tensor's bytes leaves every structure intact; only
// the entry's CRC-32 tells (the zip formats; legacy and safetensors files
// carry no checksum).
TEST(CheckpointCorruptZipTest, AFlippedBitInTensorDataFailsTheCrcCheck) {
  const auto good = ReadFileBytes(CheckpointPath("sd_zip.pt"));
  auto reference = ReadBytes(good, "sd_zip.pt");
  ASSERT_TRUE(reference.ok()) << reference.status().ToString();
  // The last stored entry before the central directory is tensor data
  // ("archive/data/N"); flip a bit in its middle.
  const size_t eocd = FindEocd(good);
  const size_t cd = Load32(good, eocd + 16);
  size_t pos = cd, last_data = 0;
  std::string last_name;
  while (Load32(good, pos) == 0x02014b50) {
    const size_t name_len =
        static_cast<size_t>(good[pos + 28]) | static_cast<size_t>(good[pos + 29]) << 8;
    const size_t extra_len =
        static_cast<size_t>(good[pos + 30]) | static_cast<size_t>(good[pos + 31]) << 8;
    const size_t comment_len =
        static_cast<size_t>(good[pos + 32]) | static_cast<size_t>(good[pos + 33]) << 8;
    std::string name(reinterpret_cast<const char*>(good.data() + pos + 46), name_len);
    if (name.find("/data/") != std::string::npos) {
      const size_t local = Load32(good, pos + 42);
      const size_t local_name =
          static_cast<size_t>(good[local + 26]) | static_cast<size_t>(good[local + 27]) << 8;
      const size_t local_extra =
          static_cast<size_t>(good[local + 28]) | static_cast<size_t>(good[local + 29]) << 8;
      const size_t size = Load32(good, pos + 24);
      if (size >= 4) {
        last_data = local + 30 + local_name + local_extra + size / 2;
        last_name = name;
      }
    }
    pos += 46 + name_len + extra_len + comment_len;
  }
  ASSERT_NE(last_data, 0u) << "no tensor data entry found";
  auto bytes = good;
  bytes[last_data] ^= std::byte{0x10};
  auto r = ReadBytes(bytes, "zip-bitflip");
  ExpectNamedError(r, "zip-bitflip");
  EXPECT_NE(r.status().message().find("CRC-32"), std::string::npos) << r.status().ToString();
  EXPECT_NE(r.status().message().find(last_name), std::string::npos) << r.status().ToString();
}

TEST(CheckpointCorruptLegacyTest, HugeElementCount) {
  auto bytes = ReadFileBytes(CheckpointPath("sd_legacy.pt"));
  // The storages follow the last pickle's STOP; make the last one enormous by
  // overwriting the high bytes of every int64 header-like position is fragile,
  // so grow the final tensor's count instead: append nothing, patch via search.
  const std::string keys_end = "e.";
  size_t stop = std::string::npos;
  for (size_t i = 0; i + 1 < bytes.size(); ++i) {
    if (bytes[i] == std::byte{'e'} && bytes[i + 1] == std::byte{'.'}) stop = i + 2;
  }
  ASSERT_NE(stop, std::string::npos);
  const int64_t huge = int64_t{1} << 60;
  auto patched = bytes;
  std::memcpy(patched.data() + stop, &huge, 8);
  ExpectNamedError(ReadBytes(patched, "legacy-count"), "legacy-count");
}

// A view that repeats its storage's elements (expand(): strides 0) made a
// few hundred bytes describe a 2^56-element float64 tensor, whose float32
// copy threw bad_alloc out of the loader (abort). Such views are refused;
// one that repeats nothing (a position_ids buffer, arange(8).expand(1, -1))
// loads.
TEST(CheckpointCorruptPickleTest, ViewsThatRepeatTheirStorageAreRefused) {
  for (const char* name : {"expanded_zip.pt", "expanded_legacy.pt"}) {
    auto r = ReadCheckpoint(CheckpointPath(name));
    ExpectNamedError(r, name);
    EXPECT_EQ(r.status().code(), StatusCode::kDataLoss) << r.status().ToString();
    EXPECT_NE(r.status().message().find("repeats elements of its storage"), std::string::npos)
        << r.status().ToString();
  }
  auto ok = ReadCheckpoint(CheckpointPath("position_ids_zip.pt"));
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  const Tensor& ids = ok->tensors.at("position_ids");
  ASSERT_EQ(ids.shape(), (std::vector<int64_t>{1, 8}));
  const Tensor copy = ids.ToContiguous();
  for (int64_t i = 0; i < 8; ++i) EXPECT_EQ(copy.data<int64_t>()[i], i);
}

// float64 tensors become float32 copies at load, one per view. Views that
// overlap in one storage are copied one by one: 16 views of 4,000 of one
// 4,096-element storage would make 256 KB from a 34 KB file, and a pickle
// of many views a copy each. The copies may not exceed the file's bytes.
// Names of one view (weights tied across layers) share one copy: 2 of them
// loaded before, 16 (an ALBERT-style stack) were refused as 16 copies.
TEST(CheckpointCorruptPickleTest, Float64CopiesBeyondTheFileAreRefused) {
  auto r = ReadCheckpoint(CheckpointPath("f64_shared_zip.pt"));
  ExpectNamedError(r, "f64_shared_zip.pt");
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss) << r.status().ToString();
  EXPECT_NE(r.status().message().find("float64"), std::string::npos) << r.status().ToString();
  auto tied = ReadCheckpoint(CheckpointPath("f64_tied_zip.pt"));
  ASSERT_TRUE(tied.ok()) << tied.status().ToString();
  EXPECT_EQ(tied->tensors.at("a").dtype(), DType::kFloat32);
  EXPECT_EQ(tied->tensors.at("b").numel(), 4096);
  auto stack = ReadCheckpoint(CheckpointPath("f64_tied_16_zip.pt"));
  ASSERT_TRUE(stack.ok()) << stack.status().ToString();
  ASSERT_EQ(stack->tensors.size(), 16u);
  const Tensor& first = stack->tensors.at("layer.0.w");
  EXPECT_EQ(first.dtype(), DType::kFloat32);
  for (const auto& [name, t] : stack->tensors) {
    EXPECT_EQ(t.raw_data(), first.raw_data()) << name;  // one copy
  }
}

// A zip checkpoint's byteorder record (PyTorch 2.1 on) was not read, so a
// file saved big-endian loaded its numbers byte-swapped (NaNs and nonsense
// out). "little" loads as before; "big" is refused as the legacy reader
// refuses big-endian files.
TEST(CheckpointCorruptZipTest, BigEndianByteOrderIsRefused) {
  auto little = ReadCheckpoint(CheckpointPath("byteorder_little_zip.pt"));
  ASSERT_TRUE(little.ok()) << little.status().ToString();
  auto plain = ReadCheckpoint(CheckpointPath("sd_zip.pt"));
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_TRUE(little->tensors.at("enc.weight").BitEqual(plain->tensors.at("enc.weight")));
  auto big = ReadCheckpoint(CheckpointPath("byteorder_big_zip.pt"));
  ExpectNamedError(big, "byteorder_big_zip.pt");
  EXPECT_EQ(big.status().code(), StatusCode::kUnimplemented) << big.status().ToString();
  EXPECT_NE(big.status().message().find("saved on a big-endian machine"), std::string::npos)
      << big.status().ToString();
}

TEST(CheckpointCorruptSafetensorsTest, HugeShapeAndOverlaps) {
  auto make = [](const std::string& header, size_t data_bytes) {
    std::vector<std::byte> b(8 + header.size() + data_bytes);
    const uint64_t n = header.size();
    std::memcpy(b.data(), &n, 8);
    std::memcpy(b.data() + 8, header.data(), header.size());
    return b;
  };
  const std::pair<const char*, const char*> cases[] = {
      {"huge-shape",
       R"({"a":{"dtype":"F32","shape":[1099511627776,1099511627776],"data_offsets":[0,16]}})"},
      {"past-end", R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,1600]}})"},
      {"size-mismatch", R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}})"},
      {"overlap",
       R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})"},
      {"bad-dtype", R"({"a":{"dtype":"Q7","shape":[4],"data_offsets":[0,16]}})"},
      {"neg-shape", R"({"a":{"dtype":"F32","shape":[-4],"data_offsets":[0,16]}})"},
      {"not-json", R"({"a":{"dtype":"F32",)"},
  };
  for (const auto& [name, header] : cases) {
    ExpectNamedError(ReadBytes(make(header, 16), name), name);
  }
  // A shape nested a million deep, whose error message showed it: nlohmann's
  // dump() recursed once per level and overflowed the stack.
  const std::string deep = R"({"a":{"dtype":"F32","shape":[99999999999,)" +
                           std::string(1000000, '[') + std::string(1000000, ']') +
                           R"(],"data_offsets":[0,16]}})";
  auto r = ReadBytes(make(deep, 16), "deep-shape");
  ExpectNamedError(r, "deep-shape");
  EXPECT_NE(r.status().message().find("nests deeper than 64 levels"), std::string::npos)
      << r.status().ToString();
  // Header length larger than the file.
  auto b = make(R"({})", 0);
  const uint64_t n = uint64_t{1} << 62;
  std::memcpy(b.data(), &n, 8);
  ExpectNamedError(ReadBytes(b, "header-len"), "header-len");
}

TEST(CheckpointCorruptFileTest, EmptyAndMissingFiles) {
  const std::string empty = ::testing::TempDir() + "/checkpoint_empty.pt";
  std::ofstream(empty).close();
  ExpectNamedError(ReadCheckpoint(empty), empty);
  const std::string missing = ::testing::TempDir() + "/checkpoint_missing.pt";
  auto r = ReadCheckpoint(missing);
  ExpectNamedError(r, missing);
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
}

TEST(CheckpointCorruptFileTest, TarIsRejectedClearly) {
  std::vector<std::byte> tar(1024);
  std::memcpy(tar.data() + 257, "ustar", 5);
  auto r = ReadBytes(tar, "old.tar");
  ExpectNamedError(r, "old.tar");
  EXPECT_EQ(r.status().code(), StatusCode::kUnimplemented);
}

// The unpickler on hand-written pickles.
StatusOr<UnpickleResult> RunPickle(const std::string& p, PickleArena* arena,
                                   std::vector<std::string>* globals) {
  const PersistentLoadFn no_pids = [](const PickleValue*,
                                      PickleArena*) -> StatusOr<const PickleValue*> {
    return DataLoss("no persistent ids here");
  };
  return Unpickle(reinterpret_cast<const std::byte*>(p.data()), p.size(), arena, no_pids, globals);
}

TEST(CheckpointPickleTest, PlaceholdersAbsorbCallsAndBuilds) {
  // builtins.eval("1") REDUCE, then BUILD with a dict, inside a list.
  const std::string p =
      "\x80\x02]q\x00"
      "cbuiltins\neval\n"
      "X\x01\x00\x00\x00"
      "1"
      "\x85R}ba."s;
  PickleArena arena;
  std::vector<std::string> globals;
  auto r = RunPickle(p, &arena, &globals);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->root->kind, PickleKind::kList);
  ASSERT_EQ(r->root->items.size(), 1u);
  EXPECT_EQ(r->root->items[0]->kind, PickleKind::kPlaceholder);
  EXPECT_EQ(globals, std::vector<std::string>{"builtins.eval"});
}

// A placeholder object keeps the attributes BUILD gives it (a dict, or the
// dict of a (dict, slots) pair), as fairseq's argparse.Namespace args are
// read; it runs nothing.
TEST(CheckpointPickleTest, PlaceholdersKeepTheirBuildAttributes) {
  // argparse.Namespace() NEWOBJ, then BUILD {"a": 5}, or ({"a": 5}, None).
  const std::string object =
      "\x80\x02"
      "cargparse\nNamespace\n"
      ")\x81"s;
  const std::string state =
      "}X\x01\x00\x00\x00"
      "aK\x05s"s;
  for (const std::string& p : {object + state + "b.", object + state + "N\x86" + "b."}) {
    PickleArena arena;
    std::vector<std::string> globals;
    auto r = RunPickle(p, &arena, &globals);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_EQ(r->root->kind, PickleKind::kPlaceholder);
    const PickleValue* a = DictGet(r->root, "a");
    ASSERT_NE(a, nullptr);
    EXPECT_EQ(a->int_value, 5);
    EXPECT_EQ(globals, std::vector<std::string>{"argparse.Namespace"});
  }
  // Any other state is dropped.
  PickleArena arena;
  std::vector<std::string> globals;
  auto r = RunPickle(object + "K\x07" + "b.", &arena, &globals);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->root->items.empty());
}

TEST(CheckpointPickleTest, MalformedPicklesFail) {
  const std::string cases[] = {
      std::string("\x80\x02", 2),                       // no STOP
      std::string("\x80\x02h\x05.", 5),                 // memo key not found
      std::string("\x80\x02\xff.", 4),                  // unknown opcode
      std::string("\x80\x02X\xff\xff\xff\x7f", 7),      // string past the end
      std::string("\x80\x02s.", 4),                     // SETITEM on an empty stack
      std::string("\x80\x02(K\x01u.", 7),               // SETITEMS without a target
      std::string("\x80\x02\x8b\xff\xff\xff\xff.", 8),  // LONG4 past the end
      std::string(".", 1),                              // STOP on an empty stack
      std::string("\x80\x02K\x01K\x02R.", 8),           // calling an int
  };
  for (const std::string& p : cases) {
    PickleArena arena;
    std::vector<std::string> globals;
    EXPECT_FALSE(RunPickle(p, &arena, &globals).ok()) << ::testing::PrintToString(p);
  }
  // Deep MARK nesting is capped.
  PickleArena arena;
  std::vector<std::string> globals;
  EXPECT_FALSE(RunPickle(std::string(100000, '(') + ".", &arena, &globals).ok());
}

TEST(CheckpointPickleTest, SelfReferenceDoesNotHang) {
  // d = {}; d["d"] = d (via memo), as the whole checkpoint's top-level dict.
  const std::string p =
      "\x80\x02}q\x00"
      "X\x01\x00\x00\x00"
      "d"
      "h\x00s."s;
  auto r = ReadBytes({reinterpret_cast<const std::byte*>(p.data()),
                      reinterpret_cast<const std::byte*>(p.data()) + p.size()},
                     "cycle");
  // Not a recognised container (no magic), so rejected; the VM itself is checked below.
  ExpectNamedError(r, "cycle");
  PickleArena arena;
  std::vector<std::string> globals;
  auto u = RunPickle(p, &arena, &globals);
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_EQ(u->root->items[1], u->root);
}

// Every global the loader does not run becomes a placeholder, its name kept
// once. Each name was looked up in a list of those seen: quadratic in a
// pickle of millions of distinct globals. Names are looked up in a set, and
// more than 4096 distinct ones (real checkpoints name a few dozen) are
// refused; a name repeated any number of times is kept once.
TEST(CheckpointPickleTest, DistinctPlaceholderGlobalsAreBounded) {
  std::string many = "\x80\x02"s;
  for (int i = 0; i < 4097; ++i) many += "cmod\nname" + std::to_string(i) + "\n0";
  many += "N.";
  PickleArena arena;
  std::vector<std::string> globals;
  auto r = RunPickle(many, &arena, &globals);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss) << r.status().ToString();
  EXPECT_NE(r.status().message().find("more than 4096 distinct globals"), std::string::npos)
      << r.status().ToString();

  std::string repeated = "\x80\x02"s;
  for (int i = 0; i < 100000; ++i) repeated += "cmod\nname\n0";
  repeated += "N.";
  PickleArena arena2;
  globals.clear();
  auto ok = RunPickle(repeated, &arena2, &globals);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(globals, std::vector<std::string>{"mod.name"});
}

// One dict object may appear many times (the pickle's memo): D(i+1) = {K1:
// D(i), K2: D(i)} with two 1 MiB keys, 20 levels, is a 2 MiB pickle whose
// flattened names would be 2^20 strings of up to 20 MiB each. With None
// leaves, as here, that was hours of copying names; with tensor leaves,
// which keep their names, it ran the machine out of memory. The names'
// bytes are bounded.
TEST(CheckpointPickleTest, SharedDictsCannotMakeHugeNames) {
  const auto binunicode = [](const std::string& s) {
    const uint32_t n = static_cast<uint32_t>(s.size());
    return "X"s + std::string(reinterpret_cast<const char*>(&n), 4) + s;
  };
  std::string p = "\x80\x02"s;
  p += binunicode(std::string(1 << 20, 'a')) + "q\x00"s;
  p += binunicode(std::string(1 << 20, 'b')) + "q\x01"s;
  p += "Nq\x02"s;  // D(0) = None, memo 2; D(i) goes to memo i + 2
  for (int level = 1; level <= 20; ++level) {
    const char previous = static_cast<char>(level + 1), memo = static_cast<char>(level + 2);
    p += "}(h\x00h"s + previous + "h\x01h"s + previous + "uq"s + memo;
  }
  p += ".";
  PickleArena arena;
  std::vector<std::string> globals;
  auto u = RunPickle(p, &arena, &globals);
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  auto flat = FlattenStateDict(u->root, StorageBytes{});
  ASSERT_FALSE(flat.ok());
  EXPECT_EQ(flat.status().code(), StatusCode::kResourceExhausted) << flat.status().ToString();
  EXPECT_NE(flat.status().message().find("names"), std::string::npos) << flat.status().ToString();
}

}  // namespace
}  // namespace encoderd
