package main

import (
	"flag"
	"fmt"
	"slices"
	"strings"
	"time"

	"stockpot/internal/router"
)

// pdFlags are route's prefill/decode disaggregation flags (internal/router/pd.go has the rules).
type pdFlags struct {
	prefill, decode stringList
	minPrefill      *int
	timeout         *time.Duration
}

func addPDFlags(fs *flag.FlagSet) *pdFlags {
	p := &pdFlags{}
	def := router.DefaultPDConfig()
	fs.Var(&p.prefill, "prefill-backend", "backend base URL of a prefill replica (serve --role prefill; repeatable): the router disaggregates, prefilling there and decoding on the decode pool")
	fs.Var(&p.decode, "decode-backend", "backend base URL of a decode replica (serve --role decode with every prefill as --prefill-peer; repeatable); --backend replicas take the role their /health reports")
	p.minPrefill = fs.Int("pd-min-prefill-tokens", def.MinPrefillTokens, "disaggregating: a prompt whose tokens not predicted cached on the chosen decode are fewer goes straight to the decode (0: hand off every prompt)")
	p.timeout = fs.Duration("pd-prefill-timeout", def.PrefillTimeout, "disaggregating: bound on the prefill hop, retries included; past it the decode computes the prompt")
	return p
}

// all is every backend URL given, plain and of a role.
func (p *pdFlags) all(backends []string) []string {
	return slices.Concat(backends, p.prefill, p.decode)
}

// check refuses bad values, and plain-text backends when https ones are configured (the
// router would send their traffic in the clear).
func (p *pdFlags) check(backendTLS bool, backends []string) error {
	if *p.minPrefill < 0 || *p.timeout < 0 {
		return fmt.Errorf("route: --pd-min-prefill-tokens %d and --pd-prefill-timeout %v must not be negative", *p.minPrefill, *p.timeout)
	}
	for _, b := range p.all(backends) {
		if backendTLS && !strings.HasPrefix(b, "https://") {
			return fmt.Errorf("route: backend %s is not https:// but --backend-tls-* is set: the router would send the replica's traffic in the clear", b)
		}
	}
	return nil
}

// apply sets the backends and the disaggregation settings of cfg.
func (p *pdFlags) apply(cfg *router.Config, backends []string) {
	cfg.Backends, cfg.PrefillBackends, cfg.DecodeBackends = backends, p.prefill, p.decode
	cfg.PD.MinPrefillTokens, cfg.PD.PrefillTimeout = *p.minPrefill, *p.timeout
	if *p.minPrefill == 0 {
		cfg.PD.MinPrefillTokens = -1 // every prompt (0 is the default in Config)
	}
}
