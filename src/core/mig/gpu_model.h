// src/core/mig/gpu_model.h: MIG-capable GPU models and their GPU-instance profiles.
//
// Pure data and lookups: no I/O. The built-in catalog (Catalog()) holds every
// MIG-capable model Prism knows: every GPU NVIDIA's default mig-parted config
// names. Where each fact comes from is in docs/mig.md ("Supported models");
// fields no source confirmed carry `unverified` notes. On real hardware the
// NVML layer builds a GpuModel from live NVML values, which win over the table.
// Immutable after construction; safe to share between threads.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/mig/profile.h"

namespace prism::mig {

enum class Architecture { kAmpere, kHopper, kBlackwell };
std::string_view ArchitectureName(Architecture arch);

struct EngineCounts {
  int copy = 0;
  int decoder = 0;
  int encoder = 0;
  int jpeg = 0;
  int ofa = 0;
};

// One GPU-instance profile of a model (what `nvidia-smi mig -lgip` lists).
struct GpuInstanceProfile {
  int nvml_index = 0;      // NVML_GPU_INSTANCE_PROFILE_* constant passed to GetProfileInfo.
  int id = 0;              // info.id: what placement and create calls take.
  ProfileName name;        // e.g. 1g.5gb+me (always a full-GI name: C == G).
  int compute_slices = 0;  // G.
  int memory_slices = 0;   // Placement size in memory-slice units.
  int64_t memory_mib = 0;  // NVML memorySizeMB.
  int multiprocessors = 0;
  EngineCounts engines;
  int max_count = 0;        // info.instanceCount on an empty GPU.
  std::vector<int> starts;  // Legal placement starts, ascending.
  // Comma-separated fields the reference tables could not confirm ("memory_mib,sms").
  std::string unverified;

  // "+me" or "+me.all": owns the GPU's single optical-flow / media-extension set, so at most one
  // such instance exists.
  bool HasMediaExtensions() const {
    return (name.attrs & (kAttrMediaExtensions | kAttrAllMediaExtensions)) != 0;
  }
  // "+me.all": takes every media engine, so it shares the GPU only with "-me" instances.
  bool TakesAllMedia() const { return (name.attrs & kAttrAllMediaExtensions) != 0; }
  // Everything but "-me" uses some of the GPU's media engines (and so cannot sit next to a
  // "+me.all" instance).
  bool UsesMedia() const { return (name.attrs & kAttrNoMediaExtensions) == 0; }
  bool IsLegalStart(int start) const;
  std::string Name() const { return name.ToString(); }
};

// Compute-instance profile indices (NVML_COMPUTE_INSTANCE_PROFILE_*) by C.
// Returns -1 for a C with no NVML constant.
int ComputeInstanceProfileIndex(int compute_slices);
// The compute-slice counts a GI of `gpu_slices` slices can be split into
// (go-nvlib: C <= G and, if C < G, 2C <= G + 1).
std::vector<int> ValidComputeSlices(int gpu_slices);

struct GpuModel {
  std::string name;                        // Canonical, e.g. "A100-SXM4-40GB".
  std::vector<std::string> aliases;        // Other spellings (HAMi model strings, short names).
  std::vector<std::string> product_names;  // nvmlDeviceGetName(), e.g. "NVIDIA A100-SXM4-40GB".
  uint32_t pci_device_id = 0;              // 0xDDDDVVVV as mig-parted's device-filter spells it.
  // Other PCI device IDs of boards with the same MIG facts (a second board revision).
  std::vector<uint32_t> other_pci_device_ids;
  Architecture architecture = Architecture::kAmpere;
  int64_t memory_mib = 0;  // nvmlDeviceGetMemoryInfo().total in MiB.
  int multiprocessors = 0;
  int memory_slices = 8;
  int compute_slices = 7;
  std::vector<GpuInstanceProfile> profiles;  // Ordered by NVML profile index.
  std::string unverified;                    // Model-level notes (e.g. "memory_mib").

  // Ampere keeps MIG mode in the InfoROM and needs a GPU reset to change it;
  // Hopper and later switch without a reset.
  bool ModeChangeNeedsReset() const { return architecture == Architecture::kAmpere; }

  // Profile lookups return an index into `profiles`, or -1.
  int FindProfile(const ProfileName& name) const;  // Matches the GI part of `name`.
  int FindProfile(std::string_view name) const;    // Parses first; -1 if unparsable.
  int FindProfileById(int profile_id) const;
  // "0x20B010DE".
  std::string PciDeviceIdString() const;
  // All profile names, e.g. "1g.5gb, 1g.5gb+me, ..." (for error messages).
  std::string ProfileList() const;
};

// Every built-in model.
const std::vector<GpuModel>& Catalog();
// Finds a model by canonical name, alias or NVML product name; case-insensitive,
// ignoring a leading "NVIDIA " / "NVIDIA-" and treating ' ', '-' and '_' alike;
// then, by exact name, a model registered from a node's reported NVML facts
// (model_facts.h: GPUs the catalog does not know).
const GpuModel* FindModel(std::string_view name);
// The catalog alone (no reported models).
const GpuModel* FindCatalogModel(std::string_view name);
const GpuModel* FindModelByPciId(uint32_t pci_device_id);
// Canonical names of all models, for error messages.
std::string ModelList();

}  // namespace prism::mig
