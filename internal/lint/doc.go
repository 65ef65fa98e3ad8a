// Package lint finds what breaks prefix caching in a log of requests (stockpot lint): it
// replays the prompts through a block-level prefix cache (the serve's own prefix.Cache,
// unbounded, so nothing is evicted), explains every miss as the server would (package miss),
// and estimates the hit rate if each cause were fixed by fixing the log and replaying it
// again: timestamps replaced by a constant, ids by a constant, tools sorted and JSON keys
// canonicalised, whitespace normalised, one cache salt.
//
// The simulation caches prompt blocks only: a server also caches the tokens it generated,
// which the next turn of a conversation reuses when the client sends the reply back
// unchanged. So the rates are what the prompts alone guarantee (a lower bound), and a
// replay of the log's requests against a server, whose replies differ from the logged ones,
// reuses the same.
//
// It is pure: the caller renders request bodies into tokens (a Renderer) and supplies the
// tokenizer's text (miss.Text). Reading the log line by line (ParseLine) never fails the
// whole run: a malformed line is reported with its number and skipped.
package lint
