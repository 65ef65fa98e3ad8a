package pipeline

import (
	"context"
	"fmt"
	"sync"

	"stockpot/internal/api"
	"stockpot/internal/engine"
	"stockpot/internal/grammar"
	"stockpot/internal/miss"
)

// Config bounds what a Pipeline builds.
type Config struct {
	// ContextLength is the model's context: a prompt must leave room for one generated token.
	ContextLength int
	// MaxPromptTokens bounds a prompt below the context (--max-prompt-tokens).
	MaxPromptTokens int
	// Grammar bounds constrained decoding's grammars (zero fields take the defaults).
	Grammar GrammarConfig
	// Blend is chunk blending's default fraction and bound (zero fields take the defaults).
	Blend BlendConfig
}

// Pipeline turns parsed requests into the engine requests they mean, for one model's
// tokenizer. It is safe for concurrent use; its state is caches (compiled grammars, the
// vocabulary's token masks) and the big-tokenize slots.
type Pipeline struct {
	tok Tokenizer
	cfg Config
	// bos is the BOS id when the model wants one (tok.AddBOS()), else -1. Chat prompts are
	// encoded without special tokens, since templates usually write BOS themselves, and get
	// BOS prepended only when the template did not.
	bos int32
	// bigTokenize holds one value per big text being tokenized (EncodeLimit).
	bigTokenize chan struct{}

	// vocab is the vocabulary for constrained decoding's token masks, built by grammarVocab
	// on the first constrained request (a trie over every token's bytes).
	vocabOnce sync.Once
	vocab     *grammar.Vocab
	grammars  grammarCache
	// controlPieces are the texts of the model's control tokens (end of generation left
	// out), listed by controlMarkup on first use.
	controlOnce   sync.Once
	controlPieces []string
}

// New returns a pipeline for tok.
func New(tok Tokenizer, cfg Config) *Pipeline {
	p := &Pipeline{tok: tok, cfg: cfg, bos: -1, bigTokenize: make(chan struct{}, BigTokenizeSlots())}
	if tok.AddBOS() {
		if ids := tok.Encode("", true, false); len(ids) > 0 {
			p.bos = ids[0]
		}
	}
	return p
}

// Spec is a validated generation: the engine request and what the runner does with its
// output.
type Spec struct {
	Req   engine.Request
	Stops []string // stop strings, matched on the detokenized text
	// ControlText renders control tokens other than the end of generation as their text
	// (llama.cpp's special=true), for the tool-call parser: [TOOL_CALLS], <|python_tag|> and
	// Kimi's section markers are control tokens in their models' vocabularies.
	ControlText bool
	// CacheReport: the client asked for usage.cache.miss; Segments are the chat prompt's
	// parts, to name where a miss is.
	CacheReport bool
	Segments    []miss.Segment
	// BlendParts name the chunks a chat marked on its messages or content parts ("blend":
	// true), for usage.cache.blend; nil for chunks given as token offsets.
	BlendParts []BlendPart
	// Transfer is the request's kv_transfer_params (prefill/decode disaggregation; nil
	// without). A decode's (do_remote_prefill) whose prompt is the one the prefill computed
	// sets Req.FirstToken to the prefill's token.
	Transfer *api.KVTransferParams
}

// Prepare validates what needs the model (vocabulary, context length) and builds the engine
// request. defaultMax is used when the client gave no max_tokens; logprobs < 0 asks for none.
func (p *Pipeline) Prepare(gp *api.GenerationParams, prompt []int32, maxTokens *int, defaultMax, logprobs int) (*Spec, error) {
	return p.prepare(gp, prompt, nil, maxTokens, defaultMax, logprobs)
}

// prepare is Prepare with the chunks a chat marked on its parts (markSpans).
func (p *Pipeline) prepare(gp *api.GenerationParams, prompt []int32, marked []BlendPart, maxTokens *int, defaultMax, logprobs int) (*Spec, error) {
	if err := p.CheckVocab("prompt", prompt); err != nil {
		return nil, err
	}
	n := len(prompt)
	switch {
	case n == 0:
		return nil, api.Invalid("prompt", "prompt is empty")
	case n >= p.cfg.ContextLength:
		return nil, api.Invalid("prompt", "prompt has %d tokens, but the model's context length is %d (the prompt must leave room for at least one generated token)", n, p.cfg.ContextLength)
	case n > p.cfg.MaxPromptTokens:
		return nil, api.Invalid("prompt", "prompt has %d tokens, over this server's limit of %d (--max-prompt-tokens)", n, p.cfg.MaxPromptTokens)
	}
	if err := p.CheckVocab("stop_token_ids", gp.StopTokenIDs); err != nil {
		return nil, err
	}
	bs, err := p.blendSpec(gp.BlendParams, marked, n)
	if err != nil {
		return nil, err
	}
	mt := defaultMax
	if maxTokens != nil {
		mt = *maxTokens
		if mt > p.cfg.ContextLength {
			return nil, api.Invalid("max_tokens", "max_tokens is %d, over the model's context length of %d", mt, p.cfg.ContextLength)
		}
	}
	sp := engine.SamplingParams{Temperature: 1}
	if gp.Temperature != nil {
		sp.Temperature = float32(*gp.Temperature)
	}
	if gp.TopP != nil && *gp.TopP < 1 {
		sp.TopP = float32(*gp.TopP)
	}
	if gp.TopK != nil && *gp.TopK > 0 {
		sp.TopK = *gp.TopK
	}
	if gp.Seed != nil {
		sp.Seed, sp.HasSeed = uint64(*gp.Seed), true
	}
	var first *int32
	if t := gp.KVTransferParams; t != nil && t.DoRemotePrefill && t.FirstToken != nil && t.PromptTokens == n &&
		t.PromptDigest == api.PromptDigest(prompt) {
		if err := p.CheckVocab("kv_transfer_params.stockpot_first_token", []int32{*t.FirstToken}); err != nil {
			return nil, err
		}
		first = t.FirstToken
	}
	return &Spec{
		Transfer: gp.KVTransferParams,
		Req: engine.Request{
			FirstToken: first,
			Prompt:     prompt, MaxTokens: mt, Sampling: sp, StopTokens: gp.StopTokenIDs,
			IgnoreEOS: gp.IgnoreEOS, Logprobs: logprobs, CacheSalt: gp.CacheSalt,
			Pins: retentionPins(gp, n), PinStrict: gp.PinStrict, // prompt_cache_retention
			MaxOffloadTokens: gp.MaxOffloadTokens,
			Blend:            bs,
		},
		Stops:       gp.StopStrings,
		CacheReport: gp.CacheReport,
		BlendParts:  marked,
	}, nil
}

// Completion tokenizes a completion's prompt (unless it came as ids) within MaxPromptTokens
// and prepares it, with api.DefaultCompletionMaxTokens when it names no max_tokens.
func (p *Pipeline) Completion(req *api.CompletionRequest) (*Spec, error) {
	prompt := req.PromptTokens
	if !req.PromptIsTokens {
		var fits bool
		if prompt, fits = p.EncodeLimit(req.PromptText, true, true, p.cfg.MaxPromptTokens); !fits && prompt == nil {
			return nil, p.TooManyTokens("prompt", p.cfg.MaxPromptTokens)
		}
	}
	logprobs := -1 // none: greedy decoding then skips the softmax (engine.Request.Logprobs)
	if req.Logprobs != nil {
		logprobs = *req.Logprobs
	}
	return p.Prepare(&req.GenerationParams, prompt, req.MaxTokens, api.DefaultCompletionMaxTokens, logprobs)
}

// ChatPrompt renders the request's messages and tools with the chat template and tokenizes
// the result (BOS in front when the model wants one and the template did not write it). An
// error the template raises is a 400 that quotes it, as is a prompt over the context.
func (p *Pipeline) ChatPrompt(req *api.ChatRequest) (string, []int32, error) {
	// Nothing over the context length can be served or is worth counting (/tokenize).
	text, ids, fits, err := p.chatTokens(req, p.cfg.ContextLength)
	if err == nil && !fits {
		err = api.Invalid("messages", "the rendered chat has more than %d tokens, the model's context length", p.cfg.ContextLength)
	}
	return text, ids, err
}

// chatTokens is ChatPrompt with the caller's token limit: fits is false, and ids nil, when
// the rendered chat has more than limit tokens.
func (p *Pipeline) chatTokens(req *api.ChatRequest, limit int) (text string, ids []int32, fits bool, err error) {
	text, err = p.tok.ApplyChatTemplate(MessagesOf(req.Messages), OptionsOf(req))
	if err != nil {
		return "", nil, false, api.Invalid("messages", "cannot apply the chat template: %v", err)
	}
	if ids, fits = p.EncodeLimit(text, false, true, limit); !fits {
		return "", nil, false, nil
	}
	if p.bos >= 0 && (len(ids) == 0 || ids[0] != p.bos) {
		ids = append([]int32{p.bos}, ids...)
	}
	return text, ids, true, nil
}

// BOS is the BOS id a prompt starts with, or -1 when the model wants none.
func (p *Pipeline) BOS() int32 { return p.bos }

// Chat is what every dialect that is a chat underneath (chat completions, Responses,
// Anthropic Messages) does once its request is a ChatRequest: render the prompt with the
// template, plan how the output is parsed and constrained, and build the engine request.
// ctx bounds only the wait for a grammar compile slot.
func (p *Pipeline) Chat(ctx context.Context, req *api.ChatRequest, maxTokens *int, logprobs int) (*Spec, *Plan, error) {
	text, prompt, err := p.ChatPrompt(req)
	if err != nil {
		return nil, nil, err
	}
	plan, constraint, err := p.PlanChat(ctx, req, text)
	if err != nil {
		return nil, nil, err
	}
	marked, err := p.markSpans(req, text, prompt)
	if err != nil {
		return nil, nil, err
	}
	// With no max_tokens a chat may use the rest of the context, as with OpenAI and vLLM.
	defaultMax := max(p.cfg.ContextLength-len(prompt), 1)
	spec, err := p.prepare(&req.GenerationParams, prompt, marked, maxTokens, defaultMax, logprobs)
	if err != nil {
		return nil, nil, err
	}
	spec.Req.Sampling.Constraint = constraint
	spec.ControlText = plan.ControlText
	if spec.CacheReport {
		spec.Segments = p.segments(req, text, prompt)
	}
	return spec, plan, nil
}

// CheckVocab returns a 400 naming the first id outside [0, VocabSize).
func (p *Pipeline) CheckVocab(param string, ids []int32) error {
	n := p.tok.VocabSize()
	for i, id := range ids {
		if id < 0 || int(id) >= n {
			return api.Invalid(param, "%s", fmt.Sprintf("token id %d at position %d is outside the vocabulary (size %d)", id, i, n))
		}
	}
	return nil
}

// GrammarStats reports the compiled grammars cached, their bytes and the compiles run.
func (p *Pipeline) GrammarStats() (entries int, bytes int64, compiles int) {
	return p.grammars.stats()
}
