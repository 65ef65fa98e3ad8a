package api

// MaxIDBytes bounds the ids a client sends back to name things: a Responses function_call's
// and function_call_output's call_id, previous_response_id, a chat tool call's id and a tool
// message's tool_call_id, an Anthropic tool_use's id and tool_result's tool_use_id. These
// strings are never tokenized (they pair a call with its result; the prompt does not hold
// them), so the token limits do not bound them, and the Responses store keeps them for later
// turns: a 7.5 MB call_id cost memory and no tokens. OpenAI refuses a call_id over 64
// characters (string_above_max_length); clients that relay other providers' calls carry longer
// ones (69 to 116 characters are seen from Codex backends and gateways that compose ids), so
// the bound is 8× OpenAI's: every real id fits, and 4096 items of them hold 2 MiB at most.
const MaxIDBytes = 512

// CheckID refuses an id over MaxIDBytes with a 400 naming param, in OpenAI's words and code.
func CheckID(param, id string) error {
	if len(id) <= MaxIDBytes {
		return nil
	}
	e := Invalid(param, "Invalid '%s': string too long. Expected a string with maximum length %d bytes, but got a string with length %d instead.", param, MaxIDBytes, len(id))
	e.Code = "string_above_max_length"
	return e
}
