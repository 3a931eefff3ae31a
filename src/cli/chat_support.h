// Chat templates for the command line: which template a model gets, and a renderer that turns a
// conversation into prompt tokens exactly as `pagoda serve` does for /v1/chat/completions.
#pragma once

#include <memory>
#include <string>

#include "model/model_file.h"
#include "server/openai_request.h"
#include "template/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace pagoda::cli {

// The template to use: `template_file` (--chat-template) when set, else the model file's, else
// pagoda's own for the model's family (Gemma 3); empty: none.
std::string chat_template_source(const std::string& template_file, const ModelFile& file,
                                 const Vocab& vocab);

// Where the template came from, for messages: "FILE", "the model file", "pagoda's gemma".
std::string chat_template_origin(const std::string& template_file, const ModelFile& file,
                                 const Vocab& vocab);

// Sets model.render_chat to render with `chat` (bos / eos tokens from the vocabulary).
void set_chat_renderer(server::ModelContext& model, std::shared_ptr<ChatTemplate> chat,
                       const Vocab& vocab);

}  // namespace pagoda::cli
