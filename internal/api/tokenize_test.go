package api

import "testing"

var tokenizeSeeds = []string{
	`{"model":"m","prompt":"Hello world","add_special":false}`,
	`{"messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"hi"}]}],"add_generation_prompt":true,"tools":[{"type":"function","function":{"name":"f"}}],"chat_template_kwargs":{"enable_thinking":false}}`,
	`{"prompt":"x","messages":[{"role":"user","content":"hi"}]}`,
	`{"model":"m","tokens":[1,15043,3186,0]}`,
	`{"tokens":[]}`, `{"tokens":[-1]}`, `{"tokens":null}`, `{"tokens":[2147483648]}`,
	`{"prompt":null}`, `{}`, `[]`, `{"messages":[{"role":"robot","content":"x"}]}`,
}

// FuzzTokenizeRequest: /tokenize and /detokenize bodies parse to a consistent request or fail
// with a 4xx *Error; never a panic.
func FuzzTokenizeRequest(f *testing.F) {
	for _, s := range tokenizeSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if r, err := ParseTokenizeRequest(body); err != nil {
			checkParsed(t, nil, err)
		} else {
			if (r.Prompt != nil) == (len(r.Messages) > 0) {
				t.Fatalf("want exactly one of prompt and messages: %+v", r)
			}
			for _, m := range r.Messages {
				if _, ok := chatRoles[m.Role]; !ok {
					t.Fatalf("role %q accepted", m.Role)
				}
			}
			if len(r.Messages) > 0 && len(r.Chat().Messages) != len(r.Messages) {
				t.Fatal("Chat lost messages")
			}
		}
		if r, err := ParseDetokenizeRequest(body); err != nil {
			checkParsed(t, nil, err)
		} else {
			if r.Tokens == nil {
				t.Fatal("no tokens accepted")
			}
			for _, id := range r.Tokens {
				if id < 0 {
					t.Fatalf("token id %d accepted", id)
				}
			}
		}
	})
}
