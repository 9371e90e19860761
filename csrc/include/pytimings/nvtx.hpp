// NVTX ranges in the "pytimings" domain: message = a registered string per region name,
// category = the region's kind. NVTX3 is header-only (headers from the nvidia-nvtx-cu12 wheel at
// build time); with no tool attached each call is an indirect call to a no-op (~1.5 ns).
#pragma once
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>

#include <nvtx3/nvToolsExt.h>

namespace pytimings {

class Nvtx {
 public:
  Nvtx();
  ~Nvtx();
  Nvtx(const Nvtx&) = delete;
  Nvtx& operator=(const Nvtx&) = delete;
  // Off the hot path, once per interned string: register it as the message for string `id`;
  // for kinds, also name category `category_of(id)` after it.
  void register_string(uint32_t id, const std::string& s);
  void name_category(uint32_t id, const std::string& s);
  static constexpr uint32_t category_of(uint32_t kind_id) noexcept { return kind_id + 1; }

  void push(uint32_t name, uint32_t kind, bool has_payload, int64_t payload) const noexcept {
    nvtxEventAttributes_t a = attributes(name, kind, has_payload, payload);
    nvtxDomainRangePushEx(domain_, &a);
  }
  void pop() const noexcept { nvtxDomainRangePop(domain_); }
  void mark(uint32_t name, uint32_t kind, bool has_payload, int64_t payload) const noexcept {
    nvtxEventAttributes_t a = attributes(name, kind, has_payload, payload);
    nvtxDomainMarkEx(domain_, &a);
  }

 private:
  nvtxEventAttributes_t attributes(uint32_t name, uint32_t kind, bool has_payload,
                                   int64_t payload) const noexcept {
    nvtxEventAttributes_t a{};
    a.version = NVTX_VERSION;
    a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    a.category = category_of(kind);
    a.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
    a.message.registered = handle(name);
    if (has_payload) {
      a.payloadType = NVTX_PAYLOAD_TYPE_INT64;
      a.payload.llValue = payload;
    }
    return a;
  }
  // Registered handles by string id, in fixed blocks that never move: a reader (any thread,
  // no lock) sees either nullptr or a complete block. A handle is stored before its id is
  // handed out to any region, so readers never race with the write of their own slot.
  static constexpr uint32_t kBlock = 4096;
  static constexpr uint32_t kBlocks = 1024;  // 4M strings; beyond that, ranges are unnamed
  nvtxStringHandle_t handle(uint32_t id) const noexcept {
    const uint32_t b = id / kBlock;
    if (b >= kBlocks) return nullptr;
    const nvtxStringHandle_t* block = blocks_[b].load(std::memory_order_acquire);
    return block ? block[id % kBlock] : nullptr;
  }

  nvtxDomainHandle_t domain_;
  std::mutex mu_;
  std::atomic<nvtxStringHandle_t*> blocks_[kBlocks] = {};
};

}  // namespace pytimings
