// Reading a vocabulary from a GGUF file's tokenizer.ggml.* metadata. It lives in format/ (the
// reader of the file) so that tokenizer/ depends on nothing but core/.
#pragma once

#include "tokenizer/vocab.h"

namespace pagoda {

class GgufFile;

// Reads tokenizer.ggml.* from a GGUF file; throws Error naming the key on bad metadata.
Vocab vocab_from_gguf(const GgufFile& file);

}  // namespace pagoda
