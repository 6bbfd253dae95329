#include "core/mig/gpu_model.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <utility>

#include "base/check.h"
#include "base/strings.h"
#include "core/mig/model_facts.h"

namespace prism::mig {
namespace {

// NVML_GPU_INSTANCE_PROFILE_* indices (mig.md §4.3).
constexpr int kIdx1Slice = 0;
constexpr int kIdx2Slice = 1;
constexpr int kIdx3Slice = 2;
constexpr int kIdx4Slice = 3;
constexpr int kIdx7Slice = 4;
constexpr int kIdx1SliceRev1 = 7;      // +me
constexpr int kIdx2SliceRev1 = 8;      // +me (A30)
constexpr int kIdx1SliceRev2 = 9;      // 1 compute slice, double memory
constexpr int kIdx1SliceGfx = 0xA;     // +gfx
constexpr int kIdx2SliceGfx = 0xB;     // +gfx
constexpr int kIdx4SliceGfx = 0xC;     // +gfx
constexpr int kIdx1SliceNoMe = 0xD;    // -me
constexpr int kIdx2SliceNoMe = 0xE;    // -me
constexpr int kIdx1SliceAllMe = 0xF;   // +me.all
constexpr int kIdx2SliceAllMe = 0x10;  // +me.all

// Per-profile facts that vary by model; the lattice (index, ID, slices, starts,
// max count) is shared by every 8-memory-slice part (mig.md §2.1).
struct ProfileFacts {
  int64_t memory_mib;
  int multiprocessors;
  EngineCounts engines;
  const char* unverified = "";
};

struct Lattice8Facts {
  int memory_gb_1g;  // GB of the 1-slice profiles ("1g.<N>gb").
  int memory_gb_2m;  // GB of the 2-memory-slice profiles.
  int memory_gb_4m;  // GB of the 4-memory-slice profiles.
  int memory_gb_8m;  // GB of the full GPU.
  ProfileFacts one, one_me, one_double, two, three, four, seven;
};

GpuInstanceProfile MakeProfile(int index, int id, int g, int gb, uint8_t attrs, int mem_slices,
                               int max_count, std::vector<int> starts, const ProfileFacts& f) {
  GpuInstanceProfile p;
  p.nvml_index = index;
  p.id = id;
  p.name = ProfileName{g, g, gb, attrs};
  p.compute_slices = g;
  p.memory_slices = mem_slices;
  p.memory_mib = f.memory_mib;
  p.multiprocessors = f.multiprocessors;
  p.engines = f.engines;
  p.max_count = max_count;
  p.starts = std::move(starts);
  p.unverified = f.unverified;
  return p;
}

std::vector<GpuInstanceProfile> Lattice8(const Lattice8Facts& f) {
  return {
      MakeProfile(kIdx1Slice, 19, 1, f.memory_gb_1g, kAttrNone, 1, 7, {0, 1, 2, 3, 4, 5, 6}, f.one),
      MakeProfile(kIdx2Slice, 14, 2, f.memory_gb_2m, kAttrNone, 2, 3, {0, 2, 4}, f.two),
      MakeProfile(kIdx3Slice, 9, 3, f.memory_gb_4m, kAttrNone, 4, 2, {0, 4}, f.three),
      MakeProfile(kIdx4Slice, 5, 4, f.memory_gb_4m, kAttrNone, 4, 1, {0}, f.four),
      MakeProfile(kIdx7Slice, 0, 7, f.memory_gb_8m, kAttrNone, 8, 1, {0}, f.seven),
      MakeProfile(kIdx1SliceRev1, 20, 1, f.memory_gb_1g, kAttrMediaExtensions, 1, 1,
                  {0, 1, 2, 3, 4, 5, 6}, f.one_me),
      MakeProfile(kIdx1SliceRev2, 15, 1, f.memory_gb_2m, kAttrNone, 2, 4, {0, 2, 4, 6},
                  f.one_double),
  };
}

// Engine sets (copy, decoder, encoder, jpeg, ofa) from mig.md §2.2.
constexpr EngineCounts kA100_1g{1, 0, 0, 0, 0};
constexpr EngineCounts kA100_1gMe{1, 1, 0, 1, 1};
constexpr EngineCounts kA100_1gDouble{1, 1, 0, 0, 0};
constexpr EngineCounts kA100_2g{2, 1, 0, 0, 0};
constexpr EngineCounts kA100_3g{3, 2, 0, 0, 0};
constexpr EngineCounts kA100_4g{4, 2, 0, 0, 0};
constexpr EngineCounts kA100_7g{7, 5, 0, 1, 1};
constexpr EngineCounts kH100_1g{1, 1, 0, 1, 0};
constexpr EngineCounts kH100_1gMe{1, 1, 0, 1, 1};
constexpr EngineCounts kH100_2g{2, 2, 0, 2, 0};
constexpr EngineCounts kH100_3g{3, 3, 0, 3, 0};
constexpr EngineCounts kH100_4g{4, 4, 0, 4, 0};
constexpr EngineCounts kH100_7g{8, 7, 0, 7, 1};

Lattice8Facts A100_40Facts() {
  // MIG User Guide values (older drivers); newer drivers report slightly more.
  return {5,
          10,
          20,
          40,
          {4864, 14, kA100_1g},
          {4864, 14, kA100_1gMe},
          {9856, 14, kA100_1gDouble},
          {9856, 28, kA100_2g},
          {19968, 42, kA100_3g},
          {19968, 56, kA100_4g},
          {40192, 98, kA100_7g}};
}

Lattice8Facts A100_80Facts() {
  // 1g.10gb is exact (GFD label); the rest are -lgip GiB x 1024 (+-8 MiB).
  // Engine counts differ between transcripts: taken from the A100-40GB.
  return {10,
          20,
          40,
          80,
          {9728, 14, kA100_1g, "engines"},
          {9728, 14, kA100_1gMe, "engines"},
          {19968, 14, kA100_1gDouble, "engines"},
          {19968, 28, kA100_2g, "engines"},
          {40192, 42, kA100_3g, "engines"},
          {40192, 56, kA100_4g, "engines"},
          {80896, 98, kA100_7g, "engines"}};
}

Lattice8Facts H100_80Facts(bool pcie) {
  if (!pcie) {
    return {10,
            20,
            40,
            80,
            {9984, 16, kH100_1g},
            {9984, 16, kH100_1gMe},
            {20096, 26, kH100_1g},
            {20096, 32, kH100_2g},
            {40448, 60, kH100_3g},
            {40448, 64, kH100_4g},
            {81152, 132, kH100_7g}};
  }
  // H100 PCIe (114 SMs): the guide gives 1g.20gb 14, 2g 30, 3g 46, 4g 62, 7g 114.
  return {10,
          20,
          40,
          80,
          {9984, 14, kH100_1g, "multiprocessors,engines"},
          {9984, 14, kH100_1gMe, "multiprocessors,engines"},
          {20096, 14, kH100_1g, "engines"},
          {20096, 30, kH100_2g, "engines"},
          {40448, 46, kH100_3g, "engines"},
          {40448, 62, kH100_4g, "engines"},
          {81152, 114, kH100_7g, "engines"}};
}

Lattice8Facts H100NvlFacts() {
  return {12,
          24,
          47,
          94,
          {11008, 16, kH100_1g, "engines"},
          {11008, 16, kH100_1gMe, "engines"},
          {22144, 26, kH100_1g, "engines"},
          {22144, 32, kH100_2g, "engines"},
          {47488, 60, kH100_3g, "engines"},
          {47488, 64, kH100_4g, "engines"},
          {95360, 132, kH100_7g, "engines"}};
}

Lattice8Facts H100_96Facts() {
  // Names from the MIG User Guide; MiB values are UNVERIFIED (chosen to derive
  // the guide's names with the driver formula); SMs and engines as H100 NVL.
  constexpr const char* kUnverified = "memory_mib,multiprocessors,engines";
  return {12,
          24,
          48,
          96,
          {11136, 16, kH100_1g, kUnverified},
          {11136, 16, kH100_1gMe, kUnverified},
          {22784, 26, kH100_1g, kUnverified},
          {22784, 32, kH100_2g, kUnverified},
          {47744, 60, kH100_3g, kUnverified},
          {47744, 64, kH100_4g, kUnverified},
          {95744, 132, kH100_7g, kUnverified}};
}

Lattice8Facts H200Facts() {
  // Copy-engine counts from mig-parted #120; other engines taken from the H100.
  return {18,
          35,
          71,
          141,
          {16384, 16, kH100_1g, "engines"},
          {16384, 16, kH100_1gMe, "engines"},
          {33024, 26, kH100_1g, "engines"},
          {33024, 32, kH100_2g, "engines"},
          {71168, 60, kH100_3g, "engines"},
          {71168, 64, kH100_4g, "engines"},
          {143104, 132, kH100_7g, "engines"}};
}

// `f` for a part with `sms` SMs instead of 132 (SM counts per profile are then UNVERIFIED:
// the proportional share, as a 1/7 slice is "roughly one seventh" of the SMs).
Lattice8Facts WithMultiprocessors(Lattice8Facts f, int sms) {
  for (ProfileFacts* p : {&f.one, &f.one_me, &f.one_double, &f.two, &f.three, &f.four, &f.seven}) {
    p->multiprocessors = p->multiprocessors * sms / 132;
  }
  return f;
}

Lattice8Facts Gh200_144Facts() {
  // mig-parted #139 gives 1g.18gb (17.50 GiB, 16 SMs) and 1g.36gb / 2g.36gb
  // (35.25 GiB, 26 / 32 SMs); the larger profiles are UNVERIFIED.
  constexpr const char* kUnverified = "memory_mib,multiprocessors,engines";
  return {18,
          36,
          72,
          144,
          {17920, 16, kH100_1g, "engines"},
          {17920, 16, kH100_1gMe, "engines"},
          {36096, 26, kH100_1g, "engines"},
          {36096, 32, kH100_2g, "engines"},
          {72704, 60, kH100_3g, kUnverified},
          {72704, 64, kH100_4g, kUnverified},
          {145664, 132, kH100_7g, kUnverified}};
}

Lattice8Facts B200Facts() {
  // mig-parted #166/#187 give the 1g and 2g profiles; 3g/4g/7g memory and SMs
  // are UNVERIFIED (the guide gives only names and copy engines).
  constexpr EngineCounts k1g{2, 1, 0, 1, 0};
  constexpr EngineCounts k1gMe{2, 1, 0, 1, 1};
  constexpr EngineCounts k2g{4, 1, 0, 1, 0};
  constexpr EngineCounts k3g{6, 1, 0, 1, 0};
  constexpr EngineCounts k4g{8, 1, 0, 1, 0};
  constexpr EngineCounts k7g{16, 1, 0, 1, 1};
  constexpr const char* kUnverified = "memory_mib,multiprocessors,engines";
  return {23,
          45,
          90,
          180,
          {22528, 18, k1g, "engines"},
          {22528, 18, k1gMe, "engines"},
          {45312, 30, k1g, "engines"},
          {45312, 36, k2g, "engines"},
          {90624, 60, k3g, kUnverified},
          {90624, 72, k4g, kUnverified},
          {181248, 144, k7g, kUnverified}};
}

// GB200, B300 and GB300 (Blackwell, 8 memory slices). NVIDIA's MIG User Guide (R580) has no
// table for them: the names are those of NVIDIA's default mig-parted config (its all-balanced
// and all-<profile> entries for 0x294110DE, 0x318210DE, 0x31C210DE); the lattice (IDs,
// placements, counts) is B200's. GB200's 1g/1g-double/2g memory and SMs are from the -lgip
// transcripts in mig-parted #227 and gpu-operator #1303; everything else is UNVERIFIED and
// chosen so the driver's formula gives the config's names.
Lattice8Facts Gb200Facts() {
  constexpr EngineCounts k1g{2, 1, 0, 1, 0};
  constexpr EngineCounts k1gMe{2, 1, 0, 1, 1};
  constexpr EngineCounts k2g{4, 2, 0, 2, 0};
  constexpr EngineCounts k3g{6, 3, 0, 3, 0};
  constexpr EngineCounts k4g{8, 4, 0, 4, 0};
  constexpr EngineCounts k7g{16, 7, 0, 7, 1};
  constexpr const char* kUnverified = "id,memory_mib,multiprocessors,engines,starts";
  return {23,
          47,
          93,
          186,
          {22528, 18, k1g, "id,engines,starts"},
          {22528, 18, k1gMe, "id,engines,starts"},
          {46592, 32, k1g, "id,engines,starts"},
          {46592, 38, k2g, "id,engines,starts"},
          {93184, 54, k3g, kUnverified},
          {93184, 72, k4g, kUnverified},
          {186368, 152, k7g, kUnverified}};
}

Lattice8Facts B300Facts() {
  constexpr EngineCounts k1g{2, 1, 0, 1, 0};
  constexpr EngineCounts k1gMe{2, 1, 0, 1, 1};
  constexpr EngineCounts k2g{4, 2, 0, 2, 0};
  constexpr EngineCounts k3g{6, 3, 0, 3, 0};
  constexpr EngineCounts k4g{8, 4, 0, 4, 0};
  constexpr EngineCounts k7g{16, 7, 0, 7, 1};
  constexpr const char* kUnverified = "id,memory_mib,multiprocessors,engines,starts";
  return {34,
          67,
          135,
          269,
          {33792, 18, k1g, kUnverified},
          {33792, 18, k1gMe, kUnverified},
          {68608, 18, k1g, kUnverified},
          {68608, 36, k2g, kUnverified},
          {137216, 54, k3g, kUnverified},
          {137216, 72, k4g, kUnverified},
          {272384, 148, k7g, kUnverified}};
}

Lattice8Facts Gb300Facts() {
  Lattice8Facts f = B300Facts();
  f.memory_gb_1g = 35;
  f.memory_gb_2m = 70;
  f.memory_gb_4m = 139;
  f.memory_gb_8m = 278;
  f.one.memory_mib = f.one_me.memory_mib = 34816;
  f.one_double.memory_mib = f.two.memory_mib = 70144;
  f.three.memory_mib = f.four.memory_mib = 140800;
  f.seven.memory_mib = 281600;
  return f;
}

// RTX PRO 6000 Blackwell (GB202): 4 compute slices over 12 placement units (1g takes 3, 2g 6,
// 4g all 12). Profiles, fractions, engines and counts: MIG User Guide R580, "RTX PRO 6000
// Blackwell MIG Profiles" (Table 11). Profile IDs, MiB, SMs and placements: `nvidia-smi mig
// -lgip` / `-lgipp` on the Server Edition, driver 610.43.02 (GCP container-engine-accelerators
// #564, bigstack-oss/cubecos #312, a public walkthrough on an 8-GPU host).
std::vector<GpuInstanceProfile> RtxPro6000Profiles() {
  const ProfileFacts one{24192, 46, {1, 1, 1, 1, 0}};
  const ProfileFacts one_me{24192, 46, {1, 1, 1, 1, 1}};
  const ProfileFacts one_all{24192, 46, {1, 4, 4, 4, 1}};
  const ProfileFacts one_none{24192, 46, {1, 0, 0, 0, 0}};
  const ProfileFacts two{48512, 94, {2, 2, 2, 2, 0}};
  const ProfileFacts two_all{48512, 94, {2, 4, 4, 4, 1}};
  const ProfileFacts two_none{48512, 94, {2, 0, 0, 0, 0}};
  const ProfileFacts four{97408, 188, {4, 4, 4, 4, 1}};
  const std::vector<int> quarter{0, 3, 6, 9};
  const std::vector<int> half{0, 6};
  return {
      MakeProfile(kIdx1Slice, 14, 1, 24, kAttrNone, 3, 4, quarter, one),
      MakeProfile(kIdx2Slice, 5, 2, 48, kAttrNone, 6, 2, half, two),
      MakeProfile(kIdx4Slice, 0, 4, 96, kAttrNone, 12, 1, {0}, four),
      MakeProfile(kIdx1SliceRev1, 21, 1, 24, kAttrMediaExtensions, 3, 1, quarter, one_me),
      MakeProfile(kIdx1SliceGfx, 47, 1, 24, kAttrGraphics, 3, 4, quarter, one),
      MakeProfile(kIdx2SliceGfx, 35, 2, 48, kAttrGraphics, 6, 2, half, two),
      MakeProfile(kIdx4SliceGfx, 32, 4, 96, kAttrGraphics, 12, 1, {0}, four),
      MakeProfile(kIdx1SliceNoMe, 67, 1, 24, kAttrNoMediaExtensions, 3, 4, quarter, one_none),
      MakeProfile(kIdx2SliceNoMe, 66, 2, 48, kAttrNoMediaExtensions, 6, 2, half, two_none),
      MakeProfile(kIdx1SliceAllMe, 65, 1, 24, kAttrAllMediaExtensions, 3, 1, quarter, one_all),
      MakeProfile(kIdx2SliceAllMe, 64, 2, 48, kAttrAllMediaExtensions, 6, 1, half, two_all),
  };
}

std::vector<GpuInstanceProfile> A30Profiles() {
  // Driver-450-era -lgip (mig.md §2.2). NVML reports wrong instance counts on
  // A30 (mig-parted hard-codes them); these are the real ones.
  const ProfileFacts one{5952, 14, {1, 1, 0, 0, 0}};
  const ProfileFacts one_me{5952, 14, {1, 1, 0, 1, 1}};
  const ProfileFacts two{11968, 28, {2, 2, 0, 0, 0}};
  const ProfileFacts two_me{11968, 28, {2, 2, 0, 1, 1}, "id,memory_mib,starts,engines"};
  const ProfileFacts four{24064, 56, {4, 4, 0, 1, 1}};
  return {
      MakeProfile(kIdx1Slice, 14, 1, 6, kAttrNone, 1, 4, {0, 1, 2, 3}, one),
      MakeProfile(kIdx2Slice, 5, 2, 12, kAttrNone, 2, 2, {0, 2}, two),
      MakeProfile(kIdx4Slice, 0, 4, 24, kAttrNone, 4, 1, {0}, four),
      MakeProfile(kIdx1SliceRev1, 21, 1, 6, kAttrMediaExtensions, 1, 1, {0, 1, 2, 3}, one_me),
      MakeProfile(kIdx2SliceRev1, 6, 2, 12, kAttrMediaExtensions, 2, 1, {0, 2}, two_me),
  };
}

GpuModel MakeModel(std::string name, std::vector<std::string> aliases,
                   std::vector<std::string> products, uint32_t pci, Architecture arch,
                   int64_t memory_mib, int sms, std::vector<GpuInstanceProfile> profiles,
                   std::string unverified = "") {
  GpuModel m;
  m.name = std::move(name);
  m.aliases = std::move(aliases);
  m.product_names = std::move(products);
  m.pci_device_id = pci;
  m.architecture = arch;
  m.memory_mib = memory_mib;
  m.multiprocessors = sms;
  m.profiles = std::move(profiles);
  m.unverified = std::move(unverified);
  return m;
}

std::vector<GpuModel> BuildCatalog() {
  using A = Architecture;
  std::vector<GpuModel> c;
  GpuModel a30 = MakeModel("A30-24GB", {"A30"}, {"NVIDIA A30"}, 0x20B710DE, A::kAmpere, 24576, 56,
                           A30Profiles());
  a30.memory_slices = 4;
  a30.compute_slices = 4;
  c.push_back(std::move(a30));
  c.push_back(MakeModel("A100-SXM4-40GB", {"A100-40GB", "A100-SXM4-40G"}, {"NVIDIA A100-SXM4-40GB"},
                        0x20B010DE, A::kAmpere, 40960, 108, Lattice8(A100_40Facts())));
  GpuModel a100_pcie = MakeModel("A100-PCIE-40GB", {"A100-40GB-PCIe"}, {"NVIDIA A100-PCIE-40GB"},
                                 0x20F110DE, A::kAmpere, 40960, 108, Lattice8(A100_40Facts()));
  a100_pcie.other_pci_device_ids = {0x20B110DE};  // mig-parted's A100-40GB filter names both.
  c.push_back(std::move(a100_pcie));
  c.push_back(MakeModel("A100-SXM4-80GB", {"A100-80GB"}, {"NVIDIA A100-SXM4-80GB"}, 0x20B210DE,
                        A::kAmpere, 81920, 108, Lattice8(A100_80Facts())));
  c.push_back(MakeModel("A100-PCIE-80GB", {"A100-80GB-PCIe"}, {"NVIDIA A100 80GB PCIe"}, 0x20B510DE,
                        A::kAmpere, 81920, 108, Lattice8(A100_80Facts())));
  c.push_back(MakeModel("H100-SXM5-80GB", {"H100-80GB", "H100-80GB-HBM3", "H100"},
                        {"NVIDIA H100 80GB HBM3"}, 0x233010DE, A::kHopper, 81559, 132,
                        Lattice8(H100_80Facts(false))));
  c.push_back(MakeModel("H100-PCIE-80GB", {"H100-80GB-PCIe"}, {"NVIDIA H100 PCIe"}, 0x233110DE,
                        A::kHopper, 81559, 114, Lattice8(H100_80Facts(true))));
  c.push_back(
      MakeModel("H100-NVL-94GB", {"H100-NVL", "H100-94GB", "H100-PCIE-94GB", "H100-SXM5-94GB"},
                {"NVIDIA H100 NVL"}, 0x232110DE, A::kHopper, 95830, 132, Lattice8(H100NvlFacts())));
  c.push_back(MakeModel("H100-SXM5-96GB", {"H100-96GB"}, {"NVIDIA H100 96GB HBM3"}, 0x233D10DE,
                        A::kHopper, 97871, 132, Lattice8(H100_96Facts()),
                        "memory_mib,product_names"));
  c.push_back(MakeModel("GH200-96GB", {"H100 on GH200", "GH200"}, {"NVIDIA GH200 480GB"},
                        0x234210DE, A::kHopper, 97871, 132, Lattice8(H100_96Facts()),
                        "memory_mib"));
  c.push_back(MakeModel("H200-SXM5-141GB", {"H200-SXM5", "H200", "H200-141GB"}, {"NVIDIA H200"},
                        0x233510DE, A::kHopper, 143771, 132, Lattice8(H200Facts())));
  c.push_back(MakeModel("H200-NVL-141GB", {"H200 NVL", "H200-NVL"}, {"NVIDIA H200 NVL"}, 0x233B10DE,
                        A::kHopper, 143771, 132, Lattice8(H200Facts())));
  c.push_back(MakeModel("GH200-144GB", {"GH200-144G"}, {"NVIDIA GH200 144G HBM3e"}, 0x234810DE,
                        A::kHopper, 146831, 132, Lattice8(Gh200_144Facts()),
                        "memory_mib,product_names"));
  c.push_back(MakeModel("B200-180GB", {"B200"}, {"NVIDIA B200"}, 0x290110DE, A::kBlackwell, 183359,
                        148, Lattice8(B200Facts()), "memory_mib,starts"));
  // The rest of the GPUs NVIDIA's default mig-parted config names (docs/mig.md, "Supported
  // models"): siblings with the same MIG facts as a model above, and the newer parts.
  c.push_back(MakeModel("A800-SXM4-80GB", {"A800-80GB"}, {"NVIDIA A800-SXM4-80GB"}, 0x20F310DE,
                        A::kAmpere, 81920, 108, Lattice8(A100_80Facts()),
                        "memory_mib,multiprocessors"));
  c.push_back(MakeModel("A800-PCIE-80GB", {"A800-80GB-PCIe"}, {"NVIDIA A800 80GB PCIe"}, 0x20F510DE,
                        A::kAmpere, 81920, 108, Lattice8(A100_80Facts()),
                        "memory_mib,multiprocessors,product_names"));
  c.push_back(MakeModel("A800-PCIE-40GB", {"A800-40GB"}, {"NVIDIA A800 40GB PCIe"}, 0x20F610DE,
                        A::kAmpere, 40960, 108, Lattice8(A100_40Facts()),
                        "memory_mib,multiprocessors,product_names"));
  c.push_back(MakeModel("H800-SXM5-80GB", {"H800-80GB", "H800"}, {"NVIDIA H800"}, 0x232410DE,
                        A::kHopper, 81559, 132, Lattice8(H100_80Facts(false)),
                        "memory_mib,multiprocessors"));
  c.push_back(MakeModel("H800-PCIE-80GB", {"H800-80GB-PCIe"}, {"NVIDIA H800 PCIe"}, 0x232210DE,
                        A::kHopper, 81559, 114, Lattice8(H100_80Facts(true)),
                        "memory_mib,multiprocessors"));
  c.push_back(MakeModel("H800-NVL-94GB", {"H800-NVL"}, {"NVIDIA H800 NVL"}, 0x233A10DE, A::kHopper,
                        95830, 132, Lattice8(H100NvlFacts()), "memory_mib,multiprocessors"));
  // H20: the guide lists it (96 GB, 7 instances); mig-parted groups it with the H100-96GB.
  c.push_back(MakeModel("H20-96GB", {"H20"}, {"NVIDIA H20"}, 0x232910DE, A::kHopper, 97871, 78,
                        Lattice8(WithMultiprocessors(H100_96Facts(), 78)),
                        "memory_mib,multiprocessors"));
  c.push_back(MakeModel("PG506-96GB", {"PG506"}, {"NVIDIA PG506-96GB"}, 0x20B610DE, A::kAmpere,
                        97871, 108, Lattice8(WithMultiprocessors(H100_96Facts(), 108)),
                        "memory_mib,multiprocessors,product_names,engines"));
  c.push_back(MakeModel("GB200-186GB", {"GB200", "GB200-HGX"}, {"NVIDIA GB200"}, 0x294110DE,
                        A::kBlackwell, 189471, 152, Lattice8(Gb200Facts()),
                        "memory_mib,multiprocessors"));
  c.push_back(MakeModel("B300-269GB", {"B300", "B300-SXM6"}, {"NVIDIA B300 SXM6 AC"}, 0x318210DE,
                        A::kBlackwell, 275040, 148, Lattice8(B300Facts()),
                        "memory_mib,multiprocessors,product_names"));
  c.push_back(MakeModel("GB300-278GB", {"GB300"}, {"NVIDIA GB300"}, 0x31C210DE, A::kBlackwell,
                        284672, 152, Lattice8(Gb300Facts()),
                        "memory_mib,multiprocessors,product_names"));
  GpuModel rtx = MakeModel("RTX-PRO-6000-96GB",
                           {"RTX-PRO-6000", "RTX PRO 6000 Blackwell", "RTX-PRO-6000-Blackwell"},
                           {"NVIDIA RTX PRO 6000 Blackwell Server Edition"}, 0x2BB510DE,
                           A::kBlackwell, 97887, 188, RtxPro6000Profiles());
  rtx.memory_slices = 12;
  rtx.compute_slices = 4;
  c.push_back(std::move(rtx));
  return c;
}

// Folds a model spelling for comparison: lower case, "nvidia" prefix dropped,
// separators (' ', '-', '_') removed.
std::string FoldModelName(std::string_view name) {
  std::string out;
  for (char ch : name) {
    if (ch == ' ' || ch == '-' || ch == '_') continue;
    out.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(ch))));
  }
  if (out.rfind("nvidia", 0) == 0) out.erase(0, 6);
  return out;
}

}  // namespace

std::string_view ArchitectureName(Architecture arch) {
  switch (arch) {
    case Architecture::kAmpere:
      return "ampere";
    case Architecture::kHopper:
      return "hopper";
    case Architecture::kBlackwell:
      return "blackwell";
  }
  return "unknown";
}

bool GpuInstanceProfile::IsLegalStart(int start) const {
  return std::binary_search(starts.begin(), starts.end(), start);
}

int ComputeInstanceProfileIndex(int compute_slices) {
  switch (compute_slices) {
    case 1:
      return 0;
    case 2:
      return 1;
    case 3:
      return 2;
    case 4:
      return 3;
    case 7:
      return 4;
    case 8:
      return 5;
    case 6:
      return 6;
    default:
      return -1;
  }
}

std::vector<int> ValidComputeSlices(int gpu_slices) {
  std::vector<int> out;
  for (int c = 1; c <= gpu_slices; ++c) {
    if (ComputeInstanceProfileIndex(c) < 0) continue;
    if (c == gpu_slices || 2 * c <= gpu_slices + 1) out.push_back(c);
  }
  return out;
}

int GpuModel::FindProfile(const ProfileName& wanted) const {
  const ProfileName gi = wanted.GpuInstanceName();
  for (size_t i = 0; i < profiles.size(); ++i) {
    if (profiles[i].name == gi) return static_cast<int>(i);
  }
  return -1;
}

int GpuModel::FindProfile(std::string_view text) const {
  auto parsed = ParseProfileName(text);
  if (!parsed.ok()) return -1;
  return FindProfile(*parsed);
}

int GpuModel::FindProfileById(int profile_id) const {
  for (size_t i = 0; i < profiles.size(); ++i) {
    if (profiles[i].id == profile_id) return static_cast<int>(i);
  }
  return -1;
}

std::string GpuModel::PciDeviceIdString() const {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%08X", pci_device_id);
  return buf;
}

std::string GpuModel::ProfileList() const {
  return StrJoin(profiles, ", ",
                 [](std::string* out, const GpuInstanceProfile& p) { out->append(p.Name()); });
}

const std::vector<GpuModel>& Catalog() {
  static const std::vector<GpuModel>* catalog = new std::vector<GpuModel>(BuildCatalog());
  return *catalog;
}

const GpuModel* FindModel(std::string_view name) {
  if (const GpuModel* m = FindCatalogModel(name); m != nullptr) return m;
  return FindReportedModel(name);
}

const GpuModel* FindCatalogModel(std::string_view name) {
  // Every spelling of every model, folded once: the scheduler looks models up per GPU and per
  // type filter, and folding the whole catalog on each call showed in its profile.
  static const auto* folded_names = [] {
    auto* index = new std::vector<std::pair<std::string, const GpuModel*>>();
    for (const GpuModel& m : Catalog()) {
      index->emplace_back(FoldModelName(m.name), &m);
      for (const auto& alias : m.aliases) index->emplace_back(FoldModelName(alias), &m);
      for (const auto& product : m.product_names) index->emplace_back(FoldModelName(product), &m);
    }
    return index;
  }();
  const std::string folded = FoldModelName(name);
  if (folded.empty()) return nullptr;
  // First match in catalog order, as before: a spelling shared by two models names the first.
  for (const auto& [spelling, model] : *folded_names) {
    if (spelling == folded) return model;
  }
  return nullptr;
}

const GpuModel* FindModelByPciId(uint32_t pci_device_id) {
  for (const GpuModel& m : Catalog()) {
    if (m.pci_device_id == pci_device_id) return &m;
    for (uint32_t other : m.other_pci_device_ids) {
      if (other == pci_device_id) return &m;
    }
  }
  return nullptr;
}

std::string ModelList() {
  return StrJoin(Catalog(), ", ", [](std::string* out, const GpuModel& m) { out->append(m.name); });
}

}  // namespace prism::mig
