package synth

// Chat templates (Jinja, as tokenizer.chat_template stores them). Package
// tokenizer owns rendering; these are the texts the presets embed, written
// here because synth sits below nothing that exports them. They follow the
// well-known public formats closely enough for llama.cpp's template
// detection (by marker substrings) to pick the same format.
const (
	// TemplateChatML is the <|im_start|>role\n...<|im_end|> format (SmolLM, Qwen2).
	TemplateChatML = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"

	// TemplateLlama2 is the [INST] format with an optional <<SYS>> block.
	TemplateLlama2 = "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}{% for message in loop_messages %}{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' ' + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}"

	// TemplateLlama3 is the <|start_header_id|>role<|end_header_id|> format.
	TemplateLlama3 = "{{- bos_token }}{%- for message in messages %}{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"

	// TemplateQwen3 is ChatML that drops earlier assistant reasoning and
	// can pre-fill an empty <think></think> when thinking is disabled.
	TemplateQwen3 = "{%- for message in messages %}{%- if message['role'] == 'assistant' %}{%- set content = message['content'] %}{%- if '</think>' in content %}{%- set content = content.split('</think>')[-1].lstrip('\\n') %}{%- endif %}{{- '<|im_start|>assistant\\n' + content + '<|im_end|>\\n' }}{%- else %}{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}{%- endif %}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}{%- endif %}"
)
