package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime/debug"
)

const usage = `stockpot: an LLM server whose centre is the KV prefix cache

Usage:
  stockpot serve [flags]                      serve a model over an OpenAI-compatible API
                                              (--role prefill|decode: one half of a disaggregated pair)
  stockpot route --backend URL ... [flags]    cache-aware gateway in front of several servers
                                              (--prefill-backend, --decode-backend: prefill and decode pools)
  stockpot bench --target URL --workload NAME measure TTFT and cache hit rates from the server's counters
  stockpot bench pd [flags]                   prefill/decode disaggregation against one and two replicas
  stockpot lint [--target URL | --model PATH] [--fail-under RATE] LOG.jsonl
                                              what in a request log breaks prefix caching
  stockpot check --target URL [--key KEY] [--strict]
                                              the go-live checklist against a running serve or route
  stockpot demo [--headless] [--exit-after D]  watch the prefix cache work, live on the dashboard
  stockpot soak [--requests N] [--seed S]    every fault at once, each answer checked against a cache-off oracle
  stockpot model synth --preset NAME --out FILE.gguf [--seed N] [--type T]
  stockpot model info FILE.gguf
  stockpot version

Run "stockpot COMMAND -h" for a command's flags. Every flag also reads STOCKPOT_<FLAG>.
`

func main() {
	if err := run(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "stockpot:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, usage)
		return fmt.Errorf("no command given")
	}
	switch args[0] {
	case "serve":
		return cmdServe(args[1:])
	case "route":
		return cmdRoute(args[1:])
	case "bench":
		return cmdBench(args[1:])
	case "lint":
		return cmdLint(args[1:])
	case "check":
		return cmdCheck(args[1:]) // check.go: the go-live checklist
	case "demo":
		return cmdDemo(args[1:])
	case "soak":
		return cmdSoak(args[1:])
	case "model":
		if len(args) < 2 {
			return fmt.Errorf("model: want a subcommand: synth or info")
		}
		switch args[1] {
		case "synth":
			return cmdSynth(args[2:])
		case "info":
			return cmdInfo(args[2:])
		}
		return fmt.Errorf("model: unknown subcommand %q (want synth or info)", args[1])
	case "version":
		return cmdVersion()
	case "help", "-h", "--help":
		fmt.Print(usage)
		return nil
	}
	fmt.Fprint(os.Stderr, usage)
	return fmt.Errorf("unknown command %q", args[0])
}

func cmdVersion() error {
	v := "devel"
	info, ok := debug.ReadBuildInfo()
	if ok {
		fmt.Printf("stockpot %s\n%s\n", v, info.GoVersion)
		for _, s := range info.Settings {
			if s.Key == "vcs.revision" || s.Key == "vcs.time" || s.Key == "vcs.modified" || s.Key == "GOARCH" || s.Key == "GOAMD64" {
				fmt.Printf("%s=%s\n", s.Key, s.Value)
			}
		}
		return nil
	}
	fmt.Printf("stockpot %s\n", v)
	return nil
}
