package tokenizer

import (
	"errors"
	"strings"
	"testing"
)

func TestChatTemplates(t *testing.T) {
	conv := []Message{
		{"system", "Be brief."},
		{"user", "Hi there"},
		{"assistant", "Hello! "},
		{"user", "2+2?"},
	}
	noSys := conv[1:]
	cases := []struct {
		name, tmpl string
		msgs       []Message
		gen        bool
		want       string
	}{
		{"chatml", TemplateChatML, conv, true,
			"<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\nHello! <|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n"},
		{"chatml-nogen", TemplateChatML, noSys[:1], false, "<|im_start|>user\nHi there<|im_end|>\n"},
		{"qwen2-default-system", TemplateQwen2, noSys[:1], true,
			"<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n"},
		{"qwen2-system", TemplateQwen2, conv[:2], false, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n"},
		{"smollm", TemplateSmolLM, noSys[:1], true,
			"<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n"},
		{"qwen3-think", TemplateQwen3, []Message{{"user", "q"}, {"assistant", "<think>\nhmm\n</think>\n\nA"}, {"user", "q2"}}, true,
			"<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\nA<|im_end|>\n<|im_start|>user\nq2<|im_end|>\n<|im_start|>assistant\n"},
		{"llama3", TemplateLlama3, conv, true,
			"<s><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n2+2?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
		{"llama2", TemplateLlama2, conv, false,
			"<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi there [/INST] Hello! </s><s>[INST] 2+2? [/INST]"},
		{"llama2-nosys", TemplateLlama2, noSys, false,
			"<s>[INST] Hi there [/INST] Hello! </s><s>[INST] 2+2? [/INST]"},
		{"mistral", TemplateMistral, conv, false,
			"<s>[INST] Be brief.\n\nHi there [/INST]Hello! </s>[INST] 2+2? [/INST]"},
	}
	for _, c := range cases {
		got, err := RenderChatTemplate(c.tmpl, c.msgs, c.gen, "<s>", "</s>")
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if got != c.want {
			t.Errorf("%s:\n got %q\nwant %q", c.name, got, c.want)
		}
	}
}

func TestChatTemplateErrors(t *testing.T) {
	v := spmTestVocab("▁hi")
	tk := mustNew(t, v)
	if _, err := tk.ApplyChatTemplate([]Message{{"user", "x"}}, true); !errors.Is(err, ErrChatTemplate) {
		t.Errorf("no template: err = %v", err)
	}
	bad := "{% for m in messages %}{{ m.content | no_such_filter_here }}{% endfor %} and a long tail of text"
	v.ChatTemplate = bad
	tk = mustNew(t, v)
	_, err := tk.ApplyChatTemplate([]Message{{"user", "x"}}, true)
	if !errors.Is(err, ErrChatTemplate) || !strings.Contains(err.Error(), bad[:40]) {
		t.Errorf("bad template: err = %v", err)
	}
	if _, err := RenderChatTemplate("{% if %}", []Message{{"user", "x"}}, false, "", ""); !errors.Is(err, ErrChatTemplate) {
		t.Errorf("unparsable: err = %v", err)
	}
	v.ChatTemplate = TemplateLlama2
	tk = mustNew(t, v)
	got, err := tk.ApplyChatTemplate([]Message{{"user", "hi"}}, true)
	if err != nil || got != "<s>[INST] hi [/INST]" {
		t.Errorf("ApplyChatTemplate = %q, %v", got, err)
	}
}
