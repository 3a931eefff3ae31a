// pagoda's own chat templates for common formats, used when a model file carries none. They are
// written for the same interpreter (and Python jinja2) as model templates, in the families' usual
// style: an optional leading system message, tools in the system turn, role checks that raise.
#include <string_view>

#include "template/chat_template.h"

namespace pagoda {
namespace {

// Llama 3 / 3.1: header-delimited turns, tools described in the system turn, tool results as the
// ipython role.
constexpr std::string_view kLlama3 = R"TPL({{- bos_token }}
{%- if messages and messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content'] | trim %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set system_message = '' %}
    {%- set loop_messages = messages %}
{%- endif %}
{%- if tools or system_message %}
    {{- '<|start_header_id|>system<|end_header_id|>\n\n' }}
    {%- if tools %}
        {{- 'You can call these functions. To call one, answer with only a JSON object ' }}
        {{- '{"name": function name, "parameters": object of argument names and values}.\n\n' }}
        {%- for tool in tools %}
            {{- tool | tojson(indent=4) }}
            {{- '\n\n' }}
        {%- endfor %}
    {%- endif %}
    {{- system_message }}
    {{- '<|eot_id|>' }}
{%- endif %}
{%- for message in loop_messages %}
    {%- if message['role'] not in ['user', 'assistant', 'tool', 'ipython'] %}
        {{- raise_exception('Unsupported message role: ' ~ message['role']) }}
    {%- endif %}
    {%- set has_calls = message.tool_calls is defined and message.tool_calls %}
    {%- if message['role'] == 'assistant' and has_calls %}
        {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
        {%- for call in message.tool_calls %}
            {%- set fn = call.function if call.function is defined else call %}
            {{- '{"name": "' + fn.name + '", "parameters": ' }}
            {%- if fn.arguments is string %}
                {{- fn.arguments }}
            {%- else %}
                {{- fn.arguments | tojson }}
            {%- endif %}
            {{- '}' }}
            {%- if not loop.last %}
                {{- '\n' }}
            {%- endif %}
        {%- endfor %}
        {{- '<|eot_id|>' }}
    {%- elif message['role'] in ['tool', 'ipython'] %}
        {{- '<|start_header_id|>ipython<|end_header_id|>\n\n' }}
        {%- set content = message['content'] %}
        {%- if content is mapping or content is sequence and content is not string %}
            {{- content | tojson }}
        {%- else %}
            {{- content }}
        {%- endif %}
        {{- '<|eot_id|>' }}
    {%- else %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' }}
        {{- message['content'] | trim + '<|eot_id|>' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}
)TPL";

// ChatML (Qwen2.5 and many fine-tunes): <|im_start|>role ... <|im_end|>, tool schemas inside
// <tools></tools>, calls inside <tool_call></tool_call>, consecutive tool results in one user turn.
constexpr std::string_view kChatml = R"TPL({%- if messages and messages[0].role == 'system' %}
    {%- set system_message = messages[0].content %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set system_message = none %}
    {%- set loop_messages = messages %}
{%- endif %}
{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if system_message is not none %}
        {{- system_message + '\n\n' }}
    {%- endif %}
    {{- '# Tools\n\nYou may call the functions below. Their JSON schemas, one per line:\n<tools>' }}
    {%- for tool in tools %}
        {{- '\n' + tool | tojson }}
    {%- endfor %}
    {{- '\n</tools>\n\nTo call a function, answer with a JSON object ' }}
    {{- '{"name": ..., "arguments": ...} inside <tool_call></tool_call> tags.<|im_end|>\n' }}
{%- elif system_message is not none %}
    {{- '<|im_start|>system\n' + system_message + '<|im_end|>\n' }}
{%- endif %}
{%- for message in loop_messages %}
    {%- if message.role == 'user' or (message.role == 'assistant' and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' }}
    {%- elif message.role == 'assistant' %}
        {{- '<|im_start|>assistant' }}
        {%- if message.content %}
            {{- '\n' + message.content }}
        {%- endif %}
        {%- for call in message.tool_calls %}
            {%- if call.function is defined %}
                {%- set call = call.function %}
            {%- endif %}
            {{- '\n<tool_call>\n{"name": "' + call.name + '", "arguments": ' }}
            {%- if call.arguments is string %}
                {{- call.arguments }}
            {%- else %}
                {{- call.arguments | tojson }}
            {%- endif %}
            {{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == 'tool' %}
        {%- if loop.first or loop.previtem.role != 'tool' %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' + message.content + '\n</tool_response>' }}
        {%- if loop.last or loop.nextitem.role != 'tool' %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- else %}
        {{- raise_exception('Unexpected message role: ' ~ message.role) }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
)TPL";

// Mistral instruct: [INST] ... [/INST] turns that must alternate, the system message folded into
// the first user turn.
constexpr std::string_view kMistral = R"TPL({%- if messages and messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content'] %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set loop_messages = messages %}
{%- endif %}
{{- bos_token }}
{%- for message in loop_messages %}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}
        {{- raise_exception('Conversation roles must alternate '
                            ~ 'user/assistant/user/assistant/...') }}
    {%- endif %}
    {%- if message['role'] == 'user' %}
        {%- if loop.first and system_message is defined %}
            {{- '[INST] ' + system_message + '\n\n' + message['content'] + ' [/INST]' }}
        {%- else %}
            {{- '[INST] ' + message['content'] + ' [/INST]' }}
        {%- endif %}
    {%- elif message['role'] == 'assistant' %}
        {{- ' ' + message['content'] + eos_token }}
    {%- else %}
        {{- raise_exception('Only user and assistant roles are supported '
                            ~ 'after the system message') }}
    {%- endif %}
{%- endfor %}
)TPL";

// Gemma: <start_of_turn>user|model turns, the system message prepended to the first user turn,
// alternation tracked in a namespace, text parts of multi-part content joined.
constexpr std::string_view kGemma = R"TPL({{- bos_token }}
{%- set ns = namespace(prefix='', expect='user') %}
{%- for message in messages %}
    {%- if message.role == 'system' %}
        {%- if not loop.first %}
            {{- raise_exception('A system message is only allowed at the start') }}
        {%- endif %}
        {%- set ns.prefix = message.content | trim + '\n\n' %}
    {%- else %}
        {%- if message.role != ns.expect %}
            {{- raise_exception('Conversation roles must alternate '
                            ~ 'user/assistant/user/assistant/...') }}
        {%- endif %}
        {%- set role = 'model' if message.role == 'assistant' else 'user' %}
        {{- '<start_of_turn>' + role + '\n' + ns.prefix }}
        {%- set ns.prefix = '' %}
        {%- if message.content is string %}
            {{- message.content | trim }}
        {%- else %}
            {%- for part in message.content %}
                {%- if part.type == 'text' %}
                    {{- part.text | trim }}
                {%- elif part.type == 'image' %}
                    {{- '<start_of_image>' }}
                {%- endif %}
            {%- endfor %}
        {%- endif %}
        {{- '<end_of_turn>\n' }}
        {%- set ns.expect = 'assistant' if message.role == 'user' else 'user' %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<start_of_turn>model\n' }}
{%- endif %}
)TPL";

}  // namespace

std::string_view builtin_chat_template(std::string_view name) {
  if (name == "llama3") return kLlama3;
  if (name == "chatml") return kChatml;
  if (name == "mistral") return kMistral;
  if (name == "gemma") return kGemma;
  return {};
}

}  // namespace pagoda
