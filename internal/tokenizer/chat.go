package tokenizer

import (
	"errors"
	"fmt"

	"github.com/ardanlabs/jinja"
)

// Message is one chat turn.
type Message struct {
	Role    string // "system", "user", "assistant", ...
	Content string
}

// Chat templates of the common model families, in the Jinja form that
// tokenizer.chat_template stores. They render the public formats; synthetic
// models embed them so that templates are exercised end to end.
const (
	// TemplateChatML: <|im_start|>role\ncontent<|im_end|>\n per turn.
	TemplateChatML = "{%- for message in messages -%}" +
		"{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}" +
		"{%- endfor -%}" +
		"{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"

	// TemplateQwen2 is ChatML with Qwen2's default system prompt.
	TemplateQwen2 = "{%- for message in messages -%}" +
		"{%- if loop.first and messages[0]['role'] != 'system' -%}" +
		"{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' -}}" +
		"{%- endif -%}" +
		"{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}" +
		"{%- endfor -%}" +
		"{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"

	// TemplateSmolLM is ChatML with SmolLM2's default system prompt.
	TemplateSmolLM = "{%- for message in messages -%}" +
		"{%- if loop.first and messages[0]['role'] != 'system' -%}" +
		"{{- '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\\n' -}}" +
		"{%- endif -%}" +
		"{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}" +
		"{%- endfor -%}" +
		"{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"

	// TemplateQwen3 is ChatML that keeps only the answer part (after
	// </think>) of earlier assistant turns and, with enable_thinking false,
	// pre-fills an empty think block.
	TemplateQwen3 = "{%- for message in messages -%}" +
		"{%- if message['role'] == 'assistant' -%}" +
		"{%- set content = message['content'] -%}" +
		"{%- if '</think>' in content -%}{%- set content = content.split('</think>')[-1].lstrip('\\n') -%}{%- endif -%}" +
		"{{- '<|im_start|>assistant\\n' + content + '<|im_end|>\\n' -}}" +
		"{%- else -%}" +
		"{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}" +
		"{%- endif -%}" +
		"{%- endfor -%}" +
		"{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}" +
		"{%- if enable_thinking is defined and enable_thinking is false -%}{{- '<think>\\n\\n</think>\\n\\n' -}}{%- endif -%}" +
		"{%- endif -%}"

	// TemplateLlama3: <|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|>.
	TemplateLlama3 = "{{- bos_token -}}" +
		"{%- for message in messages -%}" +
		"{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' -}}" +
		"{%- endfor -%}" +
		"{%- if add_generation_prompt -%}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}{%- endif -%}"

	// TemplateLlama2: <s>[INST] <<SYS>>\nsystem\n<</SYS>>\n\nuser [/INST] answer </s>.
	TemplateLlama2 = "{%- if messages[0]['role'] == 'system' -%}" +
		"{%- set system_message = messages[0]['content'] -%}{%- set loop_messages = messages[1:] -%}" +
		"{%- else -%}{%- set system_message = '' -%}{%- set loop_messages = messages -%}{%- endif -%}" +
		"{%- for message in loop_messages -%}" +
		"{%- if message['role'] == 'user' -%}" +
		"{%- if loop.first and system_message != '' -%}" +
		"{%- set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] -%}" +
		"{%- else -%}{%- set content = message['content'] -%}{%- endif -%}" +
		"{{- bos_token + '[INST] ' + content | trim + ' [/INST]' -}}" +
		"{%- elif message['role'] == 'assistant' -%}" +
		"{{- ' ' + message['content'] | trim + ' ' + eos_token -}}" +
		"{%- endif -%}" +
		"{%- endfor -%}"

	// TemplateMistral: <s>[INST] user [/INST]answer</s> with the system
	// prompt folded into the first user turn.
	TemplateMistral = "{{- bos_token -}}" +
		"{%- if messages[0]['role'] == 'system' -%}" +
		"{%- set system_message = messages[0]['content'] + '\\n\\n' -%}{%- set loop_messages = messages[1:] -%}" +
		"{%- else -%}{%- set system_message = '' -%}{%- set loop_messages = messages -%}{%- endif -%}" +
		"{%- for message in loop_messages -%}" +
		"{%- if message['role'] == 'user' -%}" +
		"{%- if loop.first -%}{{- '[INST] ' + system_message + message['content'] + ' [/INST]' -}}" +
		"{%- else -%}{{- '[INST] ' + message['content'] + ' [/INST]' -}}{%- endif -%}" +
		"{%- elif message['role'] == 'assistant' -%}" +
		"{{- message['content'] + eos_token -}}" +
		"{%- endif -%}" +
		"{%- endfor -%}"
)

// ErrChatTemplate is wrapped by every chat-template failure.
var ErrChatTemplate = errors.New("tokenizer: chat template")

// templateName is the start of a template, for error messages.
func templateName(src string) string {
	const n = 60
	r := []rune(src)
	if len(r) > n {
		return fmt.Sprintf("%q...", string(r[:n]))
	}
	return fmt.Sprintf("%q", src)
}

func compileTemplate(src string) (tmpl *jinja.Template, err error) {
	if src == "" {
		return nil, fmt.Errorf("%w: the model has no tokenizer.chat_template", ErrChatTemplate)
	}
	defer func() {
		// A template is outside input (GGUF metadata); an engine bug on it
		// must not take the server down.
		if r := recover(); r != nil {
			tmpl, err = nil, fmt.Errorf("%w %s: compile panicked: %v", ErrChatTemplate, templateName(src), r)
		}
	}()
	tmpl, err = jinja.Compile(rewriteTemplate(src))
	if err != nil {
		return nil, fmt.Errorf("%w %s: %v", ErrChatTemplate, templateName(src), err)
	}
	return tmpl, nil
}

// ApplyChatTemplate renders plain role/content msgs with the model's
// tokenizer.chat_template (Jinja), as the template's authors intended:
// bos_token and eos_token are the texts of BOS and EOS, add_generation_prompt
// opens an assistant turn. The result is text to Encode with parseSpecial
// (and addSpecial false when the template writes BOS itself). A template
// that does not compile or fails to render is an error naming it; there is
// no fallback format. RenderChat takes tools, tool calls and kwargs too.
func (t *Tokenizer) ApplyChatTemplate(msgs []Message, addGenerationPrompt bool) (string, error) {
	return t.RenderChat(chatMessages(msgs), RenderOptions{AddGenerationPrompt: addGenerationPrompt})
}

// RenderChatTemplate renders an arbitrary template source the way
// ApplyChatTemplate does, with the given BOS and EOS texts.
func RenderChatTemplate(src string, msgs []Message, addGenerationPrompt bool, bosToken, eosToken string) (string, error) {
	return RenderChatWith(src, chatMessages(msgs), RenderOptions{AddGenerationPrompt: addGenerationPrompt}, bosToken, eosToken)
}

func chatMessages(msgs []Message) []ChatMessage {
	out := make([]ChatMessage, len(msgs))
	for i, m := range msgs {
		out[i] = ChatMessage{Role: m.Role, Content: m.Content}
	}
	return out
}
