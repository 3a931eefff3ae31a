// core/markup.h: the one escaper of the Jinja escape filters and the SVG charts.
#include "core/markup.h"

#include <gtest/gtest.h>

namespace pagoda {
namespace {

TEST(Markup, EscapesTheFiveCharactersAsMarkupsafeDoes) {
  EXPECT_EQ(escape_markup("a<b>&\"c'"), "a&lt;b&gt;&amp;&#34;c&#39;");
  EXPECT_EQ(escape_markup("plain text, é"), "plain text, é");
  EXPECT_EQ(escape_markup(""), "");
}

}  // namespace
}  // namespace pagoda
