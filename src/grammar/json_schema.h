// JSON schemas as GBNF text: the grammar of the JSON texts a schema accepts (response_format
// json_schema, tool-call arguments), and of any JSON object (response_format json_object).
//
// Supported: type (object, array, string, number, integer, boolean, null, or a list of them),
// properties (generated in the schema's order), required, additionalProperties (false: none;
// true or a schema: more members after the listed ones), enum, const, items, minItems /
// maxItems, anyOf / oneOf (oneOf as anyOf: exclusivity cannot be checked while generating),
// allOf of one schema, $ref / $defs / definitions (recursive ones too), nullable, string
// minLength / maxLength / pattern / format (date, time, date-time, uuid), integer minimum /
// maximum / exclusiveMinimum / exclusiveMaximum, number minimum 0. $ref is a JSON pointer in
// a URI fragment: percent escapes and ~0 / ~1 are decoded. enum and const beside 'type' keep
// the values of that type; an empty 'type' list, or an enum with no value of the type, matches
// nothing and is an Error, as is "items": false with minItems (alone it allows only []).
// Annotations (title, description, default, examples, $schema, $id, $comment, deprecated, readOnly,
// writeOnly) are ignored. Any other keyword, or a bound the grammar cannot express, is an Error
// naming the keyword and where it is ("unsupported keyword 'uniqueItems' at /properties/tags"):
// never silently ignored.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "grammar/grammar_budget.h"

namespace pagoda {

// Rules rooted at "root". The text made counts against `budget` (nullptr: no limits) as it
// grows; GrammarLimitError past it.
std::string json_schema_to_gbnf(const nlohmann::ordered_json& schema,
                                GrammarBudget* budget = nullptr);

// The rule `name` (helpers prefixed with it) for `schema`, without the shared JSON rules
// (json_primitives_gbnf()), to combine several schemas in one grammar.
std::string json_schema_rules(const nlohmann::ordered_json& schema, const std::string& name,
                              GrammarBudget* budget = nullptr);
// The shared rules: ws, json-string, json-value, ...
std::string json_primitives_gbnf();

// Any JSON object, with whitespace between tokens as models write it.
std::string json_object_gbnf();

}  // namespace pagoda
