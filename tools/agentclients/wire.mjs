// wire.mjs records the HTTP exchanges a client library makes: the request body it sent and
// the response it got (the JSON body, or for a stream the parsed SSE chunks). It wraps fetch
// and changes nothing on the way: the library sees the server's bytes as they came.
// The summary carries the record, so the Go test can check the wire itself (usage,
// finish_reason, tool_calls) independently of how each library maps it.

// recorder returns {fetch, exchanges, done}: pass fetch to the OpenAI client; await done()
// before reading exchanges (streamed bodies are read to the end in the background).
export function recorder() {
  const exchanges = [];
  const pending = [];
  async function recordingFetch(url, init) {
    const ex = { method: init?.method ?? 'GET', path: new URL(String(url)).pathname };
    if (init?.body && typeof init.body === 'string') {
      try { ex.request = JSON.parse(init.body); } catch { ex.request_text = init.body; }
    }
    exchanges.push(ex);
    const resp = await fetch(url, init);
    ex.status = resp.status;
    ex.content_type = resp.headers.get('content-type') ?? '';
    if (!resp.body) return resp;
    const [mine, theirs] = resp.body.tee();
    pending.push(new Response(mine).text().then((text) => {
      if (ex.content_type.includes('text/event-stream')) {
        ex.chunks = [];
        for (const line of text.split('\n')) {
          if (!line.startsWith('data:')) continue;
          const data = line.slice(5).trim();
          if (data === '[DONE]') { ex.done = true; continue; }
          try { ex.chunks.push(JSON.parse(data)); } catch { ex.chunks.push({ unparsed: data }); }
        }
      } else {
        try { ex.response = JSON.parse(text); } catch { ex.response_text = text; }
      }
    }));
    return new Response(theirs, { status: resp.status, statusText: resp.statusText, headers: resp.headers });
  }
  return {
    fetch: recordingFetch,
    exchanges,
    done: () => Promise.all(pending),
  };
}

// usageOf is the usage the exchange reported: the body's, or the last chunk's that has one.
export function usageOf(ex) {
  if (ex.response?.usage) return ex.response.usage;
  for (const c of [...(ex.chunks ?? [])].reverse()) if (c.usage) return c.usage;
  return null;
}

// chatExchanges are the /v1/chat/completions exchanges, with a short per-request view.
export function chatTurns(exchanges) {
  return exchanges.filter((e) => e.path.endsWith('/chat/completions')).map((e) => {
    const u = usageOf(e);
    return {
      stream: !!e.request?.stream,
      status: e.status,
      tool_choice: e.request?.tool_choice ?? null,
      tools: (e.request?.tools ?? []).map((t) => t.function?.name ?? t.type),
      messages: (e.request?.messages ?? []).length,
      prompt_tokens: u?.prompt_tokens ?? null,
      cached_tokens: u?.prompt_tokens_details?.cached_tokens ?? null,
      completion_tokens: u?.completion_tokens ?? null,
      finish_reason: e.response?.choices?.[0]?.finish_reason ?? (e.chunks ?? []).map((c) => c.choices?.[0]?.finish_reason).find((f) => f) ?? null,
    };
  });
}

// fail prints an error summary and exits non-zero; the Go test shows it.
export function fail(summary, err) {
  summary.ok = false;
  summary.error = String(err?.stack ?? err);
  console.log(JSON.stringify(summary));
  process.exit(1);
}
