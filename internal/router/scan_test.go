package router

import (
	"bytes"
	"encoding/json"
	"testing"
)

var scanSeeds = []string{
	`{"prompt":"hello","max_tokens":1}`,
	`{"prompt":[1,2,3],"cache_salt":"t1"}`,
	` { "messages" : [ {"role":"user","content":"hi \u00e9 \"q\""} ] , "stream":true } `,
	`{"prompt":null,"cache_salt":null}`,
	`{"Prompt":"x"}`,
	`{"PROMPT":"x","prompt":"y"}`,
	`{"cache_salt":"a\u0062"}`,
	`{"cache_salt":5,"prompt":"p"}`,
	`{"prompt":"a","prompt":"b"}`,
	`{"n":-0.5e+10,"x":[{},[],{"a":[true,false,null]}],"prompt":[0]}`,
	`{"prompt":"é"}`,
	`{"prompt":01}`,
	`{"prompt":[1,2,]}`,
	`{"prompt":"x"} trailing`,
	`[{"prompt":"x"}]`,
	`{}`,
	``,
	`{"tokens":[1,2,3]}`,
	`{"toKens":[1]}`,
	`{"prompt":"\ud800"}`,
	"{\"prompt\":\"a\tb\"}",
	`{"prompt":[0,1 , 2,` + "\n" + `3]}`,
	`{"prompt":[00]}`,
	`{"prompt":[1,]}`,
	`{"prompt":[1e5,2]}`,
	`{"prompt":[3,-1]}`,
	`{"prompt":[1,[2]],"x":[4 5]}`,
	`{"prompt":[99999999999999999999]}`,
	`{"prompt":"x","prompt_cache_key":"session-42","cache_salt":"t"}`,
	`{"prompt":"x","Prompt_Cache_Key":"k"}`,
	`{"prompt":"x","prompt_cache_key":7}`,
	`{"prompt":"x","prompt_cache_key":"a\u0041"}`,
	`{"prompt":[1,2,3],"prompt":[4, 5]}`,
	`{"prompt":[1,2,3],"prompt":"x"}`,
	`{"prompt":[1,2,3],"prompt":[4,-5]}`,
	`{"prompt":[[1],[2]],"max_tokens":1}`,
}

// FuzzScanGenerateBody: the hand scanner agrees with encoding/json wherever it answers, and
// answers (ok) only on valid JSON; decodeGenerateBody always equals json.Unmarshal.
func FuzzScanGenerateBody(f *testing.F) {
	for _, s := range scanSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var want generateBody
		err := json.Unmarshal(body, &want)
		if err != nil {
			// Fields json filled before a type error count; after a syntax error it fills none.
			if _, syntax := err.(*json.SyntaxError); syntax {
				want = generateBody{}
			}
		}
		have, ok := scanGenerateBody(body)
		if ok && (err != nil || !sameBody(have, want)) {
			t.Fatalf("scan of %q: ok with %+v; json: %+v, %v", body, have, want, err)
		}
		var got generateBody
		decodeGenerateBody(body, &got)
		if err == nil && !sameBody(got, want) {
			t.Fatalf("decode of %q: %+v, want %+v", body, got, want)
		}
		// The prompt parsed while scanning is the one a second pass would parse.
		if gb, toks, ok := scanGenerateBodyTokens(body, nil); ok {
			want, wok := parseTokenArray(gb.Prompt)
			if (toks != nil) != wok || !equalInts(toks, want) {
				t.Fatalf("scan of %q: tokens %v; parse of the prompt: %v, %v", body, toks, want, wok)
			}
		}
		ids, ok := scanTokens(body)
		var tw struct {
			Tokens []int32 `json:"tokens"`
		}
		if ok && (json.Unmarshal(body, &tw) != nil || !equalInts(ids, tw.Tokens)) {
			t.Fatalf("scanTokens of %q: %v, json %v", body, ids, tw.Tokens)
		}
	})
}

func sameBody(a, b generateBody) bool {
	return bytes.Equal(a.Prompt, b.Prompt) && (a.Prompt == nil) == (b.Prompt == nil) &&
		bytes.Equal(a.Messages, b.Messages) && (a.Messages == nil) == (b.Messages == nil) && a.CacheSalt == b.CacheSalt && a.PromptCacheKey == b.PromptCacheKey
}

func equalInts(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestScanGenerateBody: the seeds, with what the scanner answers itself and what it leaves
// to encoding/json.
func TestScanGenerateBody(t *testing.T) {
	for _, tc := range []struct {
		body       string
		ok         bool
		prompt     string
		salt, msgs string
	}{
		{`{"prompt":"hello","max_tokens":1}`, true, `"hello"`, "", ""},
		{`{"prompt":[1,2,3],"cache_salt":"t1"}`, true, `[1,2,3]`, "t1", ""},
		{` { "messages" : [ {"role":"user"} ] } `, true, "", "", `[ {"role":"user"} ]`},
		{`{"prompt":"a","prompt":"b"}`, true, `"b"`, "", ""},
		{`{"Prompt":"x"}`, false, "", "", ""},           // json folds the key
		{`{"cache_salt":"a\u0062"}`, false, "", "", ""}, // the salt needs decoding
		{`{"cache_salt":5}`, false, "", "", ""},         // json's type error
		{`{"prompt":[1,2,]}`, false, "", "", ""},        // invalid
		{`{"prompt":"x"} trailing`, false, "", "", ""},  // invalid
	} {
		gb, ok := scanGenerateBody([]byte(tc.body))
		if ok != tc.ok || string(gb.Prompt) != tc.prompt || gb.CacheSalt != tc.salt || string(gb.Messages) != tc.msgs {
			t.Errorf("%s: have ok=%v %+v, want ok=%v prompt=%s salt=%q messages=%s", tc.body, ok, gb, tc.ok, tc.prompt, tc.salt, tc.msgs)
		}
	}
}

// BenchmarkDecodeGenerateBody: the scanner against encoding/json (the peer) on a
// 2048-token prompt body.
func BenchmarkDecodeGenerateBody(b *testing.B) {
	toks := make([]int32, 2048)
	for i := range toks {
		toks[i] = int32(i * 7 % 4096)
	}
	body := []byte(`{"model":"m","prompt":` + jsonInts(toks) + `,"max_tokens":1,"cache_salt":"t"}`)
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var gb generateBody
			_ = json.Unmarshal(body, &gb)
		}
	})
	b.Run("scan", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var gb generateBody
			decodeGenerateBody(body, &gb)
		}
	})
}

// FuzzParseTokenArray: the token-array fast path agrees with encoding/json wherever it answers.
func FuzzParseTokenArray(f *testing.F) {
	for _, s := range []string{`[]`, `[1]`, ` [1, 2 ,3] `, "[0,\n4095]", `[2147483647]`, `[2147483648]`, `[9999999999]`,
		`[99999999999]`, `[-1]`, `[1.5]`, `[1,]`, `[1 2]`, `[01]`, `[1,,2]`, `[1]x`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		ids, ok := parseTokenArray(b)
		if !ok {
			return
		}
		var want []int32
		if err := json.Unmarshal(b, &want); err != nil || !equalInts(ids, want) {
			t.Fatalf("%q: have %v, json %v (%v)", b, ids, want, err)
		}
	})
}
