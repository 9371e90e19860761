#include "pytimings/nvtx.hpp"

namespace pytimings {

Nvtx::Nvtx() : domain_(nvtxDomainCreateA("pytimings")) {}

Nvtx::~Nvtx() {
  for (auto& b : blocks_) delete[] b.load(std::memory_order_relaxed);
}

void Nvtx::register_string(uint32_t id, const std::string& s) {
  const uint32_t b = id / kBlock;
  if (b >= kBlocks) return;
  std::lock_guard<std::mutex> lock(mu_);
  nvtxStringHandle_t* block = blocks_[b].load(std::memory_order_relaxed);
  if (block == nullptr) {
    block = new nvtxStringHandle_t[kBlock]();
    blocks_[b].store(block, std::memory_order_release);
  }
  block[id % kBlock] = nvtxDomainRegisterStringA(domain_, s.c_str());
}

void Nvtx::name_category(uint32_t id, const std::string& s) {
  nvtxDomainNameCategoryA(domain_, category_of(id), s.c_str());
}

}  // namespace pytimings
