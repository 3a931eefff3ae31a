#include "cli/speculative_options.h"

#include <cstdio>

#include "core/error.h"
#include "model/model_check.h"

namespace pagoda::cli {

void add_speculative_options(CLI::App* cmd, SpeculativeOptions& o) {
  cmd->add_option("--draft-model", o.draft_model,
                  "Draft model for speculative decoding (same vocabulary as -m)");
  cmd->add_option("--num-speculative-tokens", o.num_tokens,
                  "Tokens proposed per step, 0 = off (default: 4 with --draft-model or "
                  "--spec-method, else 0)")
      ->check(CLI::Range(0, kMaxSpeculativeTokens));
  cmd->add_option("--spec-method", o.method,
                  "Where proposals come from: ngram (the sequence's own tokens), draft, or both "
                  "(default: draft with --draft-model, else ngram)")
      ->check(CLI::IsMember({"ngram", "draft", "both"}));
  cmd->add_option("--spec-max-running", o.max_num_running,
                  "No proposals while more sequences than this are running")
      ->default_val(8)
      ->check(CLI::Range(1, 1 << 16));
}

SpeculativeConfig speculative_config(const SpeculativeOptions& o, const ModelFile& target,
                                     DraftModel& draft) {
  SpeculativeConfig c;
  const bool has_draft = !o.draft_model.empty();
  const std::string method = o.method.empty() ? (has_draft ? "draft" : "ngram") : o.method;
  c.method = method == "draft"  ? SpecMethod::kDraft
             : method == "both" ? SpecMethod::kBoth
                                : SpecMethod::kNgram;
  if (c.method != SpecMethod::kNgram && !has_draft) {
    fail("--spec-method ", method, " needs --draft-model");
  }
  // A draft model or a named method turns speculation on at the default k.
  c.num_tokens = o.num_tokens >= 0 ? o.num_tokens : (has_draft || !o.method.empty() ? 4 : 0);
  c.max_num_running = o.max_num_running;
  if (!has_draft) return c;
  draft.file = ModelFile::open(o.draft_model);
  check_model(*draft.file);
  const Vocab& a = target.vocab();
  const Vocab& b = draft.file->vocab();
  if (a.size() != b.size()) {
    fail(o.draft_model, ": the draft's vocabulary has ", b.size(), " tokens, ", target.path(),
         "'s has ", a.size(), "; a draft must share the model's vocabulary");
  }
  for (size_t i = 0; i < a.size(); ++i) {
    if (a.tokens[i] != b.tokens[i]) {
      fail(o.draft_model, ": token ", i, " is '", b.tokens[i], "' in the draft but '", a.tokens[i],
           "' in ", target.path(), "; a draft must share the model's vocabulary");
    }
  }
  draft.model = Model::load(*draft.file);
  c.draft_model = draft.model.get();
  return c;
}

std::string speculative_summary(const SpeculativeStats& s) {
  if (s.num_proposed == 0) return "";
  char buf[160];
  std::snprintf(buf, sizeof buf,
                "proposed %lld, accepted %lld (%.1f %%), %.2f tokens per verifying step",
                static_cast<long long>(s.num_proposed), static_cast<long long>(s.num_accepted),
                100.0 * s.acceptance_rate(), s.mean_accepted_length());
  return buf;
}

SpeculativeStats speculative_delta(const SpeculativeStats& after, const SpeculativeStats& before) {
  SpeculativeStats d = after;
  d.num_verify_steps -= before.num_verify_steps;
  d.num_proposed -= before.num_proposed;
  d.num_accepted -= before.num_accepted;
  d.num_draft_tokens -= before.num_draft_tokens;
  for (size_t i = 0; i < d.proposed_at.size(); ++i) {
    d.proposed_at[i] -= before.proposed_at[i];
    d.accepted_at[i] -= before.accepted_at[i];
  }
  return d;
}

nlohmann::ordered_json speculative_json(const SpeculativeStats& s) {
  if (s.num_proposed == 0) return nullptr;
  nlohmann::ordered_json by_position = nlohmann::ordered_json::array();
  nlohmann::ordered_json proposed = nlohmann::ordered_json::array();
  for (size_t i = 0; i < s.proposed_at.size() && s.proposed_at[i] > 0; ++i) {
    by_position.push_back(s.accepted_at[i]);
    proposed.push_back(s.proposed_at[i]);
  }
  return {
      {"proposed_tokens", s.num_proposed},      {"accepted_tokens", s.num_accepted},
      {"acceptance_rate", s.acceptance_rate()}, {"mean_accepted_length", s.mean_accepted_length()},
      {"draft_tokens", s.num_draft_tokens},     {"accepted_at_position", by_position},
      {"proposed_at_position", proposed}};
}

}  // namespace pagoda::cli
