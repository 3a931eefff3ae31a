#include "core/large_buffer.h"

#include <cstdlib>
#include <cstring>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "core/error.h"

namespace pagoda {

namespace {
constexpr size_t kHugePage = size_t{2} << 20;
constexpr size_t kPage = 4096;
}  // namespace

void LargeBuffer::Free::operator()(uint8_t* p) const { std::free(p); }

LargeBuffer::LargeBuffer(size_t bytes, const char* what) {
  // The start on a huge page, the size only rounded to small pages: the tail past the last whole
  // huge page stays in small pages rather than wasting up to 2 MiB per buffer.
  const size_t align = bytes >= kHugePage ? kHugePage : kPage;
  const size_t size = (bytes + kPage - 1) / kPage * kPage;
  if (size == 0) return;
  void* p = nullptr;
  if (::posix_memalign(&p, align, size) != 0) fail("out of memory: ", size, " bytes for ", what);
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  // Advice before the first touch, so the pages are huge from the start; an error only means
  // no huge pages, which changes speed, not results.
  if (align == kHugePage) (void)::madvise(p, size, MADV_HUGEPAGE);
#endif
  std::memset(p, 0, size);
  data_.reset(static_cast<uint8_t*>(p));
  size_ = size;
}

}  // namespace pagoda
