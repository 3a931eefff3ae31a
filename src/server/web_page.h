// The page pagoda serve shows at "/": a chat that streams replies rendered as Markdown (with a
// renderer of its own that builds DOM nodes from text, so nothing a model writes is ever read as
// HTML), conversations kept in the browser's local storage, a system prompt, Regenerate and
// Copy, per-reply figures, the sampling settings, and live engine figures polled from /stats.
// Plain HTML and JavaScript (src/server/web/), inside the binary.
#pragma once

#include <string_view>

namespace pagoda::server {

std::string_view web_page_html();

}  // namespace pagoda::server
