// prompt_logits MODEL [--backend reference|cpu] [--lora ADAPTER|PEFT_FOLDER [--lora-scale S]]
// ID...: runs the token ids through the model in one batch and writes every position's logits
// to stdout as raw little-endian float32, positions x vocabulary, so a Python test can compare
// them with its own forward pass (numpy) of a Hugging Face checkpoint. Errors: one line on
// stderr, exit 1.
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/error.h"
#include "engine/generator.h"
#include "model/lora.h"
#include "model/model.h"
#include "model/model_file.h"
#include "tools/peft_lora.h"

int main(int argc, char** argv) {
  try {
    if (argc < 3) throw pagoda::Error("usage: prompt_logits MODEL [--backend reference|cpu] ID...");
    std::string backend_name = "reference", lora_path;
    float lora_scale = 1.0f;
    std::vector<pagoda::TokenId> ids;
    for (int i = 2; i < argc; ++i) {
      const std::string a = argv[i];
      if (a == "--backend" && i + 1 < argc) {
        backend_name = argv[++i];
      } else if (a == "--lora" && i + 1 < argc) {
        lora_path = argv[++i];
      } else if (a == "--lora-scale" && i + 1 < argc) {
        lora_scale = std::stof(argv[++i]);
      } else {
        ids.push_back(static_cast<pagoda::TokenId>(std::stol(a)));
      }
    }
    if (ids.empty()) throw pagoda::Error("no token ids given");
    auto file = pagoda::ModelFile::open(argv[1]);
    auto model = pagoda::Model::load(*file);
    auto backend = backend_name == "cpu" ? pagoda::make_cpu_backend(2) : pagoda::make_reference_backend();
    std::unique_ptr<pagoda::LoraAdapter> lora;
    std::unique_ptr<pagoda::Backend> device;
    if (!lora_path.empty()) {
      lora = pagoda::open_lora_adapter(lora_path, *file, lora_scale);
      device = std::move(backend);
      backend = pagoda::make_lora_backend(*device, *file, {lora.get()}, 1);
    }
    pagoda::Generator gen(*model, *backend, static_cast<int32_t>(ids.size()) + 1);
    const std::vector<float> logits = gen.prompt_logits(ids);
    std::fwrite(logits.data(), sizeof(float), logits.size(), stdout);
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
