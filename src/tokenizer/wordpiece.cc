#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace pagoda {

std::unique_ptr<Tokenizer> make_wordpiece_tokenizer(Vocab) { fail("wordpiece tokenizer: not written yet"); }

}  // namespace pagoda
