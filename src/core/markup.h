// Escaping text for HTML and XML, shared by the Jinja `escape` filters and the SVG charts.
#pragma once

#include <string>
#include <string_view>

namespace pagoda {

// `text` with & < > " ' written as &amp; &lt; &gt; &#34; &#39; (what Jinja's markupsafe
// writes, so templates render byte-identical to jinja2; valid in XML attributes and text too).
std::string escape_markup(std::string_view text);

}  // namespace pagoda
