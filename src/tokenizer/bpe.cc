#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace pagoda {

std::unique_ptr<Tokenizer> make_bpe_tokenizer(Vocab) { fail("bpe tokenizer: not written yet"); }

}  // namespace pagoda
