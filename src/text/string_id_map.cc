// StringIdMap insertion and growth (see string_id_map.h).
#include "text/string_id_map.h"

namespace ftune::text {

void StringIdMap::grow() {
  std::vector<Slot> old;
  old.swap(slots_);
  const size_t cap = old.empty() ? 16 : old.size() * 2;
  slots_.assign(cap, Slot{});
  mask_ = cap - 1;
  for (const Slot& s : old) {
    if (s.len == kEmpty) continue;
    size_t i = s.hash & mask_;
    while (slots_[i].len != kEmpty) i = (i + 1) & mask_;
    slots_[i] = s;
  }
}

void StringIdMap::set(std::string_view key, uint32_t id) {
  if ((count_ + 1) * 2 > slots_.size()) grow();  // load factor <= 1/2
  const uint64_t h = hash_bytes(key.data(), key.size());
  size_t i = h & mask_;
  while (slots_[i].len != kEmpty) {
    Slot& s = slots_[i];
    if (s.hash == h && s.len == key.size() &&
        (key.empty() || std::memcmp(pool_.data() + s.offset, key.data(), key.size()) == 0)) {
      s.id = id;
      return;
    }
    i = (i + 1) & mask_;
  }
  Slot& s = slots_[i];
  s.hash = h;
  s.offset = static_cast<uint32_t>(pool_.size());
  s.len = static_cast<uint32_t>(key.size());
  s.id = id;
  pool_.append(key);
  ++count_;
}

}  // namespace ftune::text
