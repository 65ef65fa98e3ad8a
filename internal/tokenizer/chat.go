package tokenizer

import (
	"errors"
	"fmt"
	"sync"

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

// compiledTemplate caches one compilation per Tokenizer.
type compiledTemplate struct {
	once sync.Once
	tmpl *jinja.Template
	err  error
}

// templateName is the start of a template, for error messages.
func templateName(src string) string {
	const n = 60
	r := []rune(src)
	if len(r) > n {
		return fmt.Sprintf("%q...", string(r[:n]))
	}
	return fmt.Sprintf("%q", src)
}

func compileTemplate(src string) (*jinja.Template, error) {
	if src == "" {
		return nil, fmt.Errorf("%w: the model has no tokenizer.chat_template", ErrChatTemplate)
	}
	tmpl, err := jinja.Compile(src)
	if err != nil {
		return nil, fmt.Errorf("%w %s: %v", ErrChatTemplate, templateName(src), err)
	}
	return tmpl, nil
}

// ApplyChatTemplate renders msgs with the model's tokenizer.chat_template
// (Jinja), as the template's authors intended: bos_token and eos_token are
// the texts of BOS and EOS, add_generation_prompt opens an assistant turn.
// The result is text to Encode with parseSpecial (and addSpecial false when
// the template writes BOS itself). A template that does not compile or
// fails to render is an error naming it; there is no fallback format.
func (t *Tokenizer) ApplyChatTemplate(msgs []Message, addGenerationPrompt bool) (string, error) {
	t.template.once.Do(func() {
		t.template.tmpl, t.template.err = compileTemplate(t.chatTemplate)
	})
	if t.template.err != nil {
		return "", t.template.err
	}
	return renderTemplate(t.template.tmpl, t.chatTemplate, msgs, addGenerationPrompt, t.Token(t.bos), t.Token(t.eos))
}

// RenderChatTemplate renders an arbitrary template source the way
// ApplyChatTemplate does, with the given BOS and EOS texts.
func RenderChatTemplate(src string, msgs []Message, addGenerationPrompt bool, bosToken, eosToken string) (string, error) {
	tmpl, err := compileTemplate(src)
	if err != nil {
		return "", err
	}
	return renderTemplate(tmpl, src, msgs, addGenerationPrompt, bosToken, eosToken)
}

func renderTemplate(tmpl *jinja.Template, src string, msgs []Message, addGen bool, bos, eos string) (out string, err error) {
	if len(msgs) == 0 {
		return "", fmt.Errorf("%w: no messages", ErrChatTemplate)
	}
	list := make([]any, len(msgs))
	for i, m := range msgs {
		list[i] = map[string]any{"role": m.Role, "content": m.Content}
	}
	defer func() {
		// A template is outside input; an engine bug on it must not take
		// the server down.
		if r := recover(); r != nil {
			out, err = "", fmt.Errorf("%w %s: render panicked: %v", ErrChatTemplate, templateName(src), r)
		}
	}()
	out, err = tmpl.Render(map[string]any{
		"messages":              list,
		"add_generation_prompt": addGen,
		"bos_token":             bos,
		"eos_token":             eos,
	})
	if err != nil {
		return "", fmt.Errorf("%w %s: %v", ErrChatTemplate, templateName(src), err)
	}
	return out, nil
}
