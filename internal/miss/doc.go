// Package miss explains prefix-cache misses: for a prompt that reused fewer blocks than it
// could, it names where the prompt left the longest cached chain (token offset, block, the
// decoded text around it, the segment of the chat) and why, as one Cause.
//
// # Two halves
//
// The engine finds the evidence at admission, where the match ends, from the hashes it
// computed anyway (prefix.Cache.Diverge): was the next block evicted, is the first block
// cached under another root, does a cached chain continue after the matched blocks and
// where does the prompt leave it. That costs a few map probes and a bounded copy of the
// cached chain's tokens (MaxCachedTokens), on the runner goroutine.
//
// The text half (Explain) runs on the request's goroutine, off the scheduler: it decodes a
// bounded window of the prompt and of the cached chain around the divergence and compares
// them. A cause holds when undoing it moves the divergence past the difference:
//
//   - template: a control token differs, or the texts are the same and only the tokens
//     differ (a template re-rendering a turn, or the tokenizer splitting a boundary
//     another way), or think/tool markup differs;
//   - timestamp: a date, time, ISO-8601 stamp or unix epoch covers the difference in both;
//   - uuid: a UUID, a long hex string or an id-like token covers it;
//   - reordered: the JSON value (or run of values) holding the difference is the same with
//     its keys sorted, or the same values in another order (tools);
//   - whitespace: the texts agree once whitespace at the difference is skipped;
//   - new_content otherwise.
//
// Causes the hash chain decides alone: below_block (the prompt has no reusable block),
// evicted (the next block was cached and eviction took it), salt (the content is cached
// under another root: another cache_salt or tenant) and new_content (nothing cached after
// the matched blocks). The engine sets one more itself: incomplete_state, a hybrid model's
// K/V cached past the reuse without a recurrent-state checkpoint to resume from.
//
// It is pure: no I/O, no goroutines; the tokenizer comes in through Text.
package miss
