// The page pagoda serve shows at "/": a chat that streams replies, the sampling settings, and
// live engine figures polled from /stats. Plain HTML and JavaScript inside the binary.
#pragma once

#include <string_view>

namespace pagoda::server {

std::string_view web_page_html();

}  // namespace pagoda::server
