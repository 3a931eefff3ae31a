// The web page (see web_page.h): src/server/web/page.html with page.js inlined, joined by the
// build (scripts/embed_web_page.py) into a header of the build tree. Nothing fetched from
// elsewhere.
#include "server/web_page.h"

#include "server/web_page_data.h"

namespace pagoda::server {

std::string_view web_page_html() { return kWebPage; }

}  // namespace pagoda::server
