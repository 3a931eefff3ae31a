// The routes that describe the models a server runs: /v1/models, /v1/models/{id}, /metrics and
// /openapi.json, for a server of one model (as before) and of several (model_set.h).
#include <algorithm>

#include "server/api_error.h"
#include "server/http_server.h"
#include "server/openapi.h"
#include "server/responses.h"

namespace pagoda::server {
namespace {

using nlohmann::json;

HttpResponse json_answer(const json& body) { return {200, "application/json", dump(body), {}}; }

// A model of a server of several, as /v1/models lists it: a loaded one's full entry, any
// other's id, and each with its state.
json status_entry(const ModelStatus& st) {
  json info = st.model ? st.model->info
                       : json{{"id", st.spec->id}, {"object", "model"}, {"created", 0},
                              {"owned_by", "pagoda"}};
  info["state"] = state_name(st.state);
  if (!st.last_error.empty()) info["last_error"] = st.last_error;
  return info;
}

}  // namespace

HttpResponse HttpServer::models_list() const {
  json data = json::array();
  if (models_->single()) {
    const auto m = models_->loaded().at(0);
    data.push_back(m->info);
    if (m->context.loras != nullptr) {
      for (const LoraSet::Listed& a : m->context.loras->list()) {
        data.push_back(adapter_info(*m, a.adapter));
      }
    }
  } else {
    for (const ModelStatus& st : models_->status()) data.push_back(status_entry(st));
  }
  return json_answer({{"object", "list"}, {"data", data}});
}

HttpResponse HttpServer::model_entry(const std::string& id) const {
  if (!models_->single()) {
    const int index = models_->find(id);
    if (index < 0) throw models_->not_found(id);
    return json_answer(status_entry(models_->status().at(static_cast<size_t>(index))));
  }
  const auto m = models_->loaded().at(0);
  if (const AdapterHold a = m->context.adapter_named(id)) {
    return json_answer(adapter_info(*m, *a));
  }
  if (!m->context.answers_to(id)) {
    throw ApiError(404, "invalid_request_error", "The model '" + id + "' does not exist", "model",
                   "model_not_found");
  }
  return json_answer(m->info);
}

std::string HttpServer::metrics_text() const {
  if (models_->single()) {
    const auto m = models_->loaded().at(0);
    std::string text = metrics_.render(m->engine->stats());
    if (m->context.loras != nullptr) text += lora_metrics(*m->context.loras);
    return text;
  }
  const std::vector<ModelStatus> status = models_->status();
  ServerMetrics::ModelStats stats;
  for (const ModelStatus& st : status) {
    if (st.model) stats.emplace_back(st.spec->id, st.model->engine->stats());
  }
  std::string text = metrics_.render(stats);
  text += "# HELP pagoda_model_loaded 1 for a model loaded, 0 for one on disk or loading.\n"
          "# TYPE pagoda_model_loaded gauge\n";
  for (const ModelStatus& st : status) {
    text += "pagoda_model_loaded" + model_labels(st.spec->id) + " " +
            (st.state == ModelState::kLoaded ? "1" : "0") + "\n";
  }
  return text;
}

std::string HttpServer::openapi_text() const {
  const auto loaded = models_->loaded();
  if (models_->single()) return openapi_json(options_.limits, loaded.at(0)->context);
  // Several models: the description of a loaded one (the first), naming every model.
  ModelContext names;
  if (!loaded.empty()) {
    names = loaded.front()->context;
  } else {
    names.max_model_len = 1 << 22;
    names.vocab_size = 1 << 30;
  }
  names.loras.reset();
  names.name = models_->specs().at(0).id;
  names.aliases.clear();
  for (const ModelSpec& s : models_->specs()) {
    if (s.id != names.name) names.aliases.push_back(s.id);
    names.aliases.insert(names.aliases.end(), s.aliases.begin(), s.aliases.end());
  }
  json spec = json::parse(openapi_json(options_.limits, names));
  json ids = json::array();
  for (const ModelSpec& s : models_->specs()) ids.push_back(s.id);
  json& schemas = spec["components"]["schemas"];
  schemas["Sampling"]["properties"]["model"]["enum"] = ids;
  ids.push_back(nullptr);  // "not given"
  schemas["CountTokensRequest"]["properties"]["model"]["enum"] = ids;
  schemas["EmbeddingRequest"]["properties"]["model"]["enum"] = ids;
  return spec.dump(1);
}

}  // namespace pagoda::server
