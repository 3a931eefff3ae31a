// pagoda: an LLM inference engine. Subcommands live in one file each under src/cli/.
//
// Exit codes: 0 success, 1 bad input (a file, a value the command cannot use), 2 a command used
// wrongly (unknown command or option, a missing argument), 130 interrupted. Every error is one
// line on stderr; a mistyped command or option gets the nearest one suggested.
#include <algorithm>
#include <iostream>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/ranks.h"
#include "core/error.h"

namespace pagoda::cli {

std::string nearest(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_distance = std::string::npos;
  for (const std::string& c : candidates) {
    // Levenshtein distance, one row at a time.
    std::vector<size_t> row(c.size() + 1);
    for (size_t j = 0; j <= c.size(); ++j) row[j] = j;
    for (size_t i = 1; i <= word.size(); ++i) {
      size_t diagonal = row[0];
      row[0] = i;
      for (size_t j = 1; j <= c.size(); ++j) {
        const size_t above = row[j];
        row[j] =
            std::min({row[j] + 1, row[j - 1] + 1, diagonal + (word[i - 1] == c[j - 1] ? 0 : 1)});
        diagonal = above;
      }
    }
    if (row[c.size()] < best_distance) {
      best_distance = row[c.size()];
      best = c;
    }
  }
  // A typo changes a few characters; anything further is another word.
  const size_t limit = std::max<size_t>(2, word.size() / 3);
  return best_distance <= limit ? best : std::string();
}

}  // namespace pagoda::cli

namespace {

std::string did_you_mean(const std::string& hint) {
  return hint.empty() ? "" : " (did you mean '" + hint + "'?)";
}

std::string one_line(std::string s) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

// The option nearest an unknown one: a typo (nearest), else the option sharing the longest
// start with the word, of three letters at least ("--ctx" -> "--ctx-size", "--threads-batch"
// -> "--threads").
std::string nearest_option(const std::string& word, const std::vector<std::string>& names) {
  std::string hint = pagoda::cli::nearest(word, names);
  if (!hint.empty()) return hint;
  const std::string bare = word.substr(std::min(word.find_first_not_of('-'), word.size()));
  if (bare.size() < 3) return "";
  size_t best = 0;
  for (const std::string& n : names) {
    const std::string b = n.substr(std::min(n.find_first_not_of('-'), n.size()));
    const size_t shared = std::min(b.size(), bare.size());
    if (shared >= 3 && b.compare(0, shared, bare, 0, shared) == 0 && shared > best) {
      best = shared;
      hint = n;
    }
  }
  return hint;
}

// Every name an option of `cmd` answers to ("-n", "--num-tokens"), help included.
std::vector<std::string> option_names(const CLI::App* cmd) {
  std::vector<std::string> names = {"--help", "-h"};
  for (const CLI::Option* opt : cmd->get_options()) {
    for (const std::string& s : opt->get_snames()) names.push_back("-" + s);
    for (const std::string& l : opt->get_lnames()) names.push_back("--" + l);
  }
  return names;
}

// llama.cpp's options of several letters after one dash, which CLI11 would read as a short
// option and its value ("-ngl 99" as "-n gl"): their long names, where `cmd` has them. Returns
// the first such option `cmd` lacks, or "".
std::string rename_llama_options(const CLI::App* cmd, int argc, char** argv) {
  static char n_gpu_layers[] = "--n-gpu-layers";
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]) != "-ngl") continue;
    const std::vector<std::string> names = option_names(cmd);
    if (std::find(names.begin(), names.end(), n_gpu_layers) == names.end()) return argv[i];
    argv[i] = n_gpu_layers;
  }
  return "";
}

// The deepest subcommand the command line chose ("pagoda bench latency" -> latency).
const CLI::App* chosen_command(const CLI::App& app, int argc, char** argv) {
  const CLI::App* cmd = &app;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.empty() || arg[0] == '-') continue;
    const CLI::App* sub = nullptr;
    for (const CLI::App* s : cmd->get_subcommands({})) {
      if (s->get_name() == arg) sub = s;
    }
    if (sub == nullptr) break;
    cmd = sub;
  }
  return cmd;
}

std::string command_path(const CLI::App* cmd) {
  std::string path;
  for (const CLI::App* c = cmd; c != nullptr; c = c->get_parent()) {
    path = c->get_parent() == nullptr ? "pagoda" + path : " " + c->get_name() + path;
  }
  return path;
}

// "-n/--num-tokens" for the option called `name` in `cmd`, and what its values are ("a number").
std::pair<std::string, std::string> describe_option(const CLI::App* cmd, const std::string& name) {
  const CLI::Option* opt = nullptr;
  for (const CLI::Option* o : cmd->get_options()) {
    if (o->check_name(name)) opt = o;
  }
  if (opt == nullptr) return {name, "a value"};
  const std::string full_type = opt->get_type_name();  // "INT:INT in [0 - 1048576]" with a Range
  const std::string type = full_type.substr(0, full_type.find(':'));
  std::string names = opt->get_name(false, true);
  std::replace(names.begin(), names.end(), ',', '/');
  const std::string kind = type == "FLOAT"  ? "a number"
                           : type == "INT"  ? "a whole number"
                           : type == "UINT" ? "a whole number, 0 or more"
                                            : "a value of type " + type;
  return {names, kind};
}

// A value CLI11 could not take, worded as pagoda's other errors are (CLI11 says "Could not
// convert: --temp = abc" or "--num-tokens: Value gl not in range 0 to 1048576"); empty for
// other errors.
std::string value_message(const CLI::ParseError& e, const CLI::App* cmd) {
  const std::string what = one_line(e.what());
  std::smatch m;
  static const std::regex convert(R"(^Could not convert: (\S+) = (.*)$)");
  static const std::regex range(R"(^(\S+): Value (.*) not in range (\S+) to (\S+)$)");
  static const std::regex member(R"(^(\S+): (.*) not in \{(.*)\}$)");
  if (dynamic_cast<const CLI::ConversionError*>(&e) != nullptr &&
      std::regex_match(what, m, convert)) {
    const auto [names, kind] = describe_option(cmd, m[1]);
    return names + " takes " + kind + ", not '" + m[2].str() + "'";
  }
  if (dynamic_cast<const CLI::ValidationError*>(&e) == nullptr) return "";
  if (std::regex_match(what, m, range)) {
    const auto [names, kind] = describe_option(cmd, m[1]);
    return names + " takes " + kind + " from " + m[3].str() + " to " + m[4].str() + ", not '" +
           m[2].str() + "'";
  }
  if (std::regex_match(what, m, member)) {
    const auto [names, kind] = describe_option(cmd, m[1]);
    return names + " takes one of " + std::regex_replace(m[3].str(), std::regex(","), ", ") +
           ", not '" + m[2].str() + "'";
  }
  return "";
}

// One line for a CLI11 parse error, naming the command and, for a typo, the nearest option.
std::string usage_message(const CLI::ParseError& e, const CLI::App& app, int argc, char** argv) {
  const CLI::App* cmd = chosen_command(app, argc, argv);
  const std::string path = command_path(cmd);
  std::string what = one_line(e.what());
  if (dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr) {
    // "The following argument(s) was/were not expected: Y X": CLI11 lists them last first.
    // Name the first option among them (its value follows it), else the first word.
    // The command's leftovers are whole arguments ("Two words" stays one); the message's list
    // is split at spaces only where they are not at hand.
    std::vector<std::string> words = cmd->remaining();
    if (words.empty()) {
      const size_t colon = what.find(": ");
      std::istringstream list(colon == std::string::npos ? what : what.substr(colon + 2));
      for (std::string w; list >> w;) words.insert(words.begin(), w);
    }
    std::string extra = words.empty() ? what : words.front();
    for (const std::string& w : words) {
      if (w.size() > 1 && w[0] == '-') {
        extra = w;
        break;
      }
    }
    if (!extra.empty() && extra[0] == '-') {
      const std::string name = extra.substr(0, extra.find('='));
      return "unknown option '" + name + "' for '" + path + "'" +
             did_you_mean(nearest_option(name, option_names(cmd))) + "; see " + path +
             " --help";
    }
    std::vector<std::string> subs;
    for (const CLI::App* s : cmd->get_subcommands({})) subs.push_back(s->get_name());
    if (!subs.empty()) {
      return "unknown command '" + extra + "' for '" + path + "'" +
             did_you_mean(pagoda::cli::nearest(extra, subs));
    }
    return "unexpected argument '" + extra + "' for '" + path + "'; see " + path + " --help";
  }
  if (cmd == &app && dynamic_cast<const CLI::RequiredError*>(&e) != nullptr) {
    return "no command given; see pagoda --help";
  }
  if (std::string value_error = value_message(e, cmd); !value_error.empty()) {
    return path + ": " + value_error + "; see " + path + " --help";
  }
  return path + ": " + what + "; see " + path + " --help";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"pagoda: load, inspect and run language models on the CPU"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "pagoda 0.1.0");
  // --help shows every option's default.
  app.option_defaults()->always_capture_default();
  std::vector<std::pair<CLI::App*, pagoda::cli::Action>> commands;
  auto add = [&](auto adder) {
    size_t before = app.get_subcommands({}).size();
    pagoda::cli::Action action = adder(app);
    commands.emplace_back(app.get_subcommands({})[before], std::move(action));
  };
  add(pagoda::cli::add_inspect);
  add(pagoda::cli::add_tokenize);
  add(pagoda::cli::add_detokenize);
  add(pagoda::cli::add_run);
  add(pagoda::cli::add_chat);
  add(pagoda::cli::add_embed);
  add(pagoda::cli::add_synth);
  add(pagoda::cli::add_quantize);
  add(pagoda::cli::add_convert);
  add(pagoda::cli::add_imatrix);
  add(pagoda::cli::add_estimate);
  add(pagoda::cli::add_bench);
  add(pagoda::cli::add_serve);
  add(pagoda::cli::add_list);
  add(pagoda::cli::add_ps);
  // A word where a subcommand must come ("pagoda runn", "pagoda bench latnecy"): name it, with
  // the nearest command, before CLI11 reports only that a subcommand is required.
  {
    const CLI::App* cmd = &app;
    for (int i = 1; i < argc && argv[i][0] != '-'; ++i) {
      std::vector<std::string> names;
      const CLI::App* next = nullptr;
      for (const CLI::App* s : cmd->get_subcommands({})) {
        names.push_back(s->get_name());
        if (s->get_name() == argv[i]) next = s;
      }
      if (names.empty()) break;
      if (next == nullptr) {
        const std::string path = command_path(cmd);
        std::cerr << "error: unknown command '" << argv[i] << "'"
                  << (cmd == &app ? "" : " for '" + path + "'")
                  << did_you_mean(pagoda::cli::nearest(argv[i], names)) << "; see " << path
                  << " --help\n";
        return 2;
      }
      cmd = next;
    }
  }
  const CLI::App* chosen = chosen_command(app, argc, argv);
  if (const std::string lacking = rename_llama_options(chosen, argc, argv); !lacking.empty()) {
    const std::string path = command_path(chosen);
    std::cerr << "error: unknown option '" << lacking << "' for '" << path << "'; see " << path
              << " --help\n";
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    return app.exit(e);  // --help, --version
  } catch (const CLI::ParseError& e) {
    std::cerr << "error: " << usage_message(e, app, argc, argv) << "\n";
    return 2;
  }
  std::optional<pagoda::cli::Ranks> ranks;  // started by mpirun as one of several ranks
  try {
    ranks.emplace();
    for (auto& [sub, action] : commands) {
      if (sub->parsed()) return action();
    }
  } catch (const pagoda::cli::UsageError& e) {
    std::cerr << "error: " << one_line(e.what()) << "\n";
    pagoda::cli::end_ranks_on_error(2);
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "error: " << one_line(e.what()) << "\n";
    pagoda::cli::end_ranks_on_error(1);
    return 1;
  }
  return 1;
}
