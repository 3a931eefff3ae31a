// Shared by the filter files: the filter table type and jinja2's attribute getter ("a.b.0"
// looks up a, then b, then item 0), which map, sort, groupby and friends use.
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "template/evaluator.h"

namespace pagoda::jinja {

using FilterFn = Value (*)(Evaluator&, const Value&, CallArgs&);
using FilterTable = std::unordered_map<std::string, FilterFn>;

void add_sequence_filters(FilterTable* table);

// The lookup path of an `attribute` argument; empty for none (the item itself).
std::vector<Value> attribute_parts(const Value& attribute);
// Follows the path; `fallback` replaces an undefined result when given.
Value get_attribute(Evaluator& ev, Value item, const std::vector<Value>& parts,
                    const Value* fallback);

}  // namespace pagoda::jinja
