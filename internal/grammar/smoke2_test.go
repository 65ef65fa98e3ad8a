package grammar

import "testing"

func TestSmokeSchema(t *testing.T) {
	n, err := JSONSchema([]byte(`{"type":"object","properties":{"name":{"type":"string","maxLength":5},"age":{"type":"integer","minimum":18,"maximum":120},"tags":{"type":"array","items":{"enum":["a","b"]},"maxItems":2}},"required":["name"]}`))
	if err != nil {
		t.Fatal(err)
	}
	g := mustCompile(t, n)
	for _, s := range []string{`{"name":"bob"}`, `{"name": "bob", "age": 18}`, `{"name":"x","tags":["a", "b"]}`, "{\n  \"name\": \"\",\n  \"age\": 120\n}"} {
		if !matches(t, g, s) {
			t.Errorf("rejects %s", s)
		}
	}
	for _, s := range []string{`{}`, `{"age":18,"name":"bob"}`, `{"name":"bob","age":17}`, `{"name":"bob","age":121}`, `{"name":"toolong"}`, `{"name":"x","tags":["a","b","a"]}`} {
		if matches(t, g, s) {
			t.Errorf("accepts %s", s)
		}
	}
}
