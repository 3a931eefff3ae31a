// Chat templates for the command line (chat_support.h).
#include "cli/chat_support.h"

#include "core/mapped_file.h"
#include "model/architecture.h"

namespace pagoda::cli {
namespace {

std::string token_text(const Vocab& vocab, TokenId id) {
  return vocab.valid(id) ? vocab.tokens[static_cast<size_t>(id)] : std::string();
}

}  // namespace

std::string chat_template_source(const std::string& template_file, const ModelFile& file,
                                 const Vocab& vocab) {
  if (!template_file.empty()) return read_file(template_file);
  if (!vocab.chat_template.empty()) return vocab.chat_template;
  const Architecture* arch = find_architecture(file.config().architecture);
  if (arch && !arch->fallback_chat_template.empty()) {
    return std::string(builtin_chat_template(arch->fallback_chat_template));
  }
  return "";
}

std::string chat_template_origin(const std::string& template_file, const ModelFile& file,
                                 const Vocab& vocab) {
  if (!template_file.empty()) return template_file;
  if (!vocab.chat_template.empty()) return "the model file's";
  const Architecture* arch = find_architecture(file.config().architecture);
  if (arch && !arch->fallback_chat_template.empty()) {
    return "pagoda's " + std::string(arch->fallback_chat_template);
  }
  return "none";
}

void set_chat_renderer(server::ModelContext& model, std::shared_ptr<ChatTemplate> chat,
                       const Vocab& vocab) {
  const std::string bos = token_text(vocab, vocab.bos), eos = token_text(vocab, vocab.eos);
  model.render_chat = [chat, bos, eos](const nlohmann::ordered_json& messages, bool add_prompt,
                                       const nlohmann::ordered_json& extra) {
    return chat->apply_ordered(messages, add_prompt, bos, eos, extra);
  };
}

}  // namespace pagoda::cli
