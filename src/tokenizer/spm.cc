#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace pagoda {

std::unique_ptr<Tokenizer> make_spm_tokenizer(Vocab) { fail("spm tokenizer: not written yet"); }

}  // namespace pagoda
