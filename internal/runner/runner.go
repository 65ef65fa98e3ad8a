package runner

import (
	"context"
	"errors"
	"slices"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"stockpot/internal/api"
	"stockpot/internal/engine"
	"stockpot/internal/pipeline"
)

// Token is a generated token with where its text starts in the choice's text.
type Token struct {
	engine.Token
	Offset int // Unicode code points of decoded text before this token
}

// Result is a finished generation.
type Result struct {
	Finish string       // "stop" or "length"
	Usage  engine.Usage // CompletionTokens = len(Tokens)
	Tokens []Token      // every token accounted to the client, up to the stop string
}

// ErrClientGone ends a generation whose client disconnected or stopped reading.
var ErrClientGone = errors.New("runner: client went away")

// Config is what a Runner needs to know of the server it runs for.
type Config struct {
	// BlockSize is the engine's block size: the TTFT floor's ledger keys blocks as the
	// engine's prefix cache does.
	BlockSize int
	// MaxPromptTokens bounds CalibrateFloor's longest prompt.
	MaxPromptTokens int
	// OnFloorPlan, when set, sees every TTFT floor decision (tests).
	OnFloorPlan func(FloorPlan)
}

// Runner runs generations on an engine: it owns the engine's Generate stream for each
// request, detokenizes it, cuts it at stop strings, holds the TTFT floor and explains misses.
type Runner struct {
	gen    engine.Generator
	tok    pipeline.Tokenizer
	cfg    Config
	floor  *floorState
	misses *prometheus.CounterVec // stockpot_prefix_miss_total{cause} (miss.go)
}

// New returns a Runner on gen. Its metrics (the TTFT floor's, stockpot_prefix_miss_total)
// register on reg.
func New(gen engine.Generator, tok pipeline.Tokenizer, cfg Config, reg prometheus.Registerer) (*Runner, error) {
	r := &Runner{gen: gen, tok: tok, cfg: cfg}
	var err error
	if r.misses, err = newMissCounter(reg); err != nil {
		return nil, err
	}
	if r.floor, err = newFloorState(reg); err != nil {
		return nil, err
	}
	r.floor.onPlan = cfg.OnFloorPlan
	return r, nil
}

// EngineError maps an engine error to the API: the engine's refusals of the request are the
// client's fault (400), shutting down is 503, anything else is the server's (500).
func EngineError(err error) *api.Error {
	switch {
	case errors.Is(err, engine.ErrPromptTooLong):
		return api.Invalid("prompt", "%v", err)
	case errors.Is(err, engine.ErrBlend):
		return api.Invalid("blend", "%v", err)
	case errors.Is(err, engine.ErrInvalid):
		return api.Invalid("", "%v", err)
	case errors.Is(err, engine.ErrPinBudget):
		return api.Invalid("pin_strict", "%v (pin_strict: retry without it for a partial pin)", err)
	case errors.Is(err, engine.ErrShutdown):
		return api.Unavailable("the server is shutting down; retry on another replica")
	default:
		return api.Internal("engine error: %v", err)
	}
}

// Generate runs spec on the engine. started is called once the engine accepted the request
// (streaming handlers send their headers there). onDelta gets the text that is safe to show
// and the tokens consumed since the last call; an error from it means the client is gone.
// On success the result's tokens and usage describe exactly what the client was sent.
// The TTFT floor applies when ctx carries a Principal with a floor (WithPrincipal).
//
// Generate always drains the engine's channel before returning.
func (r *Runner) Generate(ctx context.Context, spec *pipeline.Spec, started func() error,
	onDelta func(text string, toks []Token) error) (*Result, error) {
	client := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	plan := r.planFloor(client, spec) // floor.go; nil without a floor
	out, err := r.gen.Generate(ctx, &spec.Req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ErrClientGone
		}
		return nil, EngineError(err)
	}
	var floor *floorRun
	if plan != nil {
		floor = &floorRun{plan: plan, start: plan.at}
		if plan.Padded {
			out = r.deliverShifted(ctx, out, plan.at.Add(plan.Target), floor)
		}
	}
	defer func() {
		for range out { // drain so the engine never blocks on us
		}
	}()
	if started != nil {
		if err := started(); err != nil {
			return nil, ErrClientGone
		}
	}
	var (
		sd       = r.tok.NewStreamDecoder()
		stop     = stopFilter{stops: spec.Stops}
		res      Result
		runes    int
		phase    = genRunning
		final    *engine.Output
		emitted  deltaText // one piece passes uncopied
		batchBuf []Token
	)
	for o := range out {
		if floor != nil && floor.shownAt.IsZero() && (len(o.Tokens) > 0 || o.Done) {
			r.floorFirst(floor)
		}
		if o.Done {
			oc := o
			final = &oc
		}
		if phase != genRunning {
			continue // draining after we cancelled; errors here are our cancellation's echo
		}
		if o.Err != nil {
			clientLeft := ctx.Err() != nil // checked before our own cancel below
			cancel()
			if clientLeft {
				return nil, ErrClientGone
			}
			return nil, EngineError(o.Err)
		}
		emitted.Reset()
		batch := batchBuf[:0]
		for _, t := range o.Tokens {
			gt := Token{Token: t, Offset: runes}
			res.Tokens = append(res.Tokens, gt)
			batch = append(batch, gt)
			if r.tok.IsEOG(t.ID) || slices.Contains(spec.Req.StopTokens, t.ID) {
				continue // end-of-generation and stop tokens count, but add no text (as vLLM)
			}
			piece := sd.Add(t.ID)
			if spec.ControlText && r.tok.IsControl(t.ID) {
				piece += string(r.tok.Piece(t.ID))
			}
			runes += utf8.RuneCountInString(piece)
			e, hit := stop.push(piece)
			emitted.WriteString(e)
			if hit {
				phase = genCut
				cancel()
				break
			}
		}
		if o.Done && phase == genRunning {
			e, hit := stop.push(sd.Flush())
			emitted.WriteString(e)
			if hit {
				phase = genCut
			} else {
				emitted.WriteString(stop.flush())
			}
		}
		if emitted.Len() > 0 || len(batch) > 0 {
			if err := onDelta(emitted.String(), batch); err != nil {
				phase = genGone
				cancel()
			}
		}
		batchBuf = batch
	}
	finish, err := genOutcome(phase, final, ctx.Err() != nil, client.Err() != nil)
	if err != nil {
		return nil, err
	}
	res.Finish = finish
	res.Usage = genUsage(final, len(spec.Req.Prompt))
	res.Usage.CompletionTokens = len(res.Tokens)
	if floor != nil {
		r.floorDone(floor, spec, &res) // masks a padded request's usage
	}
	r.explainMiss(spec, &res.Usage)  // miss.go
	nameBlendParts(spec, &res.Usage) // blend.go
	return &res, nil
}

// genPhase is where a generation stands. Once it leaves genRunning the engine has been
// cancelled and Generate only drains the stream, keeping the final output.
type genPhase uint8

const (
	genRunning genPhase = iota // passing the engine's outputs to the client
	genCut                     // a stop string ended the output (finish "stop")
	genGone                    // the client stopped reading (onDelta failed)
)

// genOutcome decides how a drained generation ends: its finish reason, or the error to
// return. final is the engine's final output (nil when none came), cancelled says the
// generation's context ended (the client's, or our own cancel), clientDone the client's.
func genOutcome(phase genPhase, final *engine.Output, cancelled, clientDone bool) (string, error) {
	switch {
	case phase == genGone || clientDone:
		// The client went away, even if the engine got to the end before it noticed: what
		// was made reached nobody.
		return "", ErrClientGone
	case phase == genCut:
		return engine.FinishStop, nil // whether or not the engine's last message raced our cancel
	case final == nil && cancelled:
		return "", ErrClientGone
	case final == nil:
		return "", api.Internal("the engine ended the request without a final message")
	}
	switch final.FinishReason {
	case engine.FinishStop, engine.FinishLength:
		return final.FinishReason, nil
	case engine.FinishCancelled:
		if cancelled {
			return "", ErrClientGone
		}
		return "", api.Unavailable("the engine cancelled the request (shutting down?)")
	}
	return "", api.Internal("the engine finished with an unknown reason %q", final.FinishReason)
}

// genUsage is the usage a generation reports: the engine's, or, only after a cut whose
// cancellation raced the engine's last message, the prompt counted as computed.
func genUsage(final *engine.Output, prompt int) engine.Usage {
	if final != nil && final.Usage != nil {
		return *final.Usage
	}
	return engine.Usage{PromptTokens: prompt, ComputedTokens: prompt}
}

// TokenIDs returns the ids of toks.
func TokenIDs(toks []Token) []int32 {
	ids := make([]int32, len(toks))
	for i, t := range toks {
		ids[i] = t.ID
	}
	return ids
}
