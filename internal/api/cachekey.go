package api

// MaxPromptCacheKeyBytes bounds prompt_cache_key. OpenAI documents the field as a string that
// groups requests sharing a prefix (a user, a conversation, a hash of one); 1024 bytes holds
// any id or digest a caller would send, while keeping the router's per-key memory and metric
// labels small. Longer values are a mistake (a prompt pasted into the key) and get a 400.
const MaxPromptCacheKeyBytes = 1024

// checkPromptCacheKey validates prompt_cache_key: at most MaxPromptCacheKeyBytes (encoding/json
// already refused a non-string with a 400 naming the field).
func checkPromptCacheKey(k string) error {
	if len(k) > MaxPromptCacheKeyBytes {
		return Invalid("prompt_cache_key", "prompt_cache_key is %d bytes, over the limit of %d; send an id or a hash of one", len(k), MaxPromptCacheKeyBytes)
	}
	return nil
}
