// What a model file means, beyond what its format's reader checks: a file whose every size and
// offset is in bounds can still describe no runnable model (a context length of 0, tensors whose
// data overlap, an embedding table with fewer rows than the tokenizer has tokens, a norm epsilon
// of 0). `run` and `serve` refuse such a file in one line; `inspect` shows it, lists every
// problem and exits non-zero.
#pragma once

#include <string>
#include <vector>

#include "model/model_file.h"

namespace pagoda {

// Every problem, one sentence each, in a fixed order; empty when none is found. A file without
// layers (a tokenizer-only GGUF) is checked as a vocabulary, not as a model.
std::vector<std::string> model_problems(const ModelFile& file);

// Throws Error "<path>: <first problem>" (and how many more there are).
void check_model(const ModelFile& file);

}  // namespace pagoda
