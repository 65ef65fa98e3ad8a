package main

import (
	"flag"

	"stockpot/internal/router"
)

// kvEventsFlags are route's flags for vLLM-format KV events (internal/router/vllm_events.go).
type kvEventsFlags struct {
	listen  *string
	maxRate *float64
}

func addKVEventsFlags(fs *flag.FlagSet) *kvEventsFlags {
	return &kvEventsFlags{
		listen:  fs.String("kv-events-listen", "", "bind a ZeroMQ SUB here (e.g. tcp://*:5557) that replicas publish vLLM-format KV events to (vLLM's and SGLang's --kv-events-config endpoint, serve's --kv-events-zmq): the topic kv@<host:port>@<model> names the --backend; every backend's index then comes from it, not from /v1/kv-events"),
		maxRate: fs.Float64("kv-events-max-rate", router.DefaultKVEventsMaxRate, "with --kv-events-listen: events a second one backend may send (a burst of as many); past it its batches are dropped and its index emptied until it slows"),
	}
}
