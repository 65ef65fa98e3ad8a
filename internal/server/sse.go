package server

import (
	"bytes"
	"encoding/json"
	"net/http"

	"stockpot/internal/api"
)

// sseWriter writes server-sent events: "data: JSON\n\n" per chunk, "data: [DONE]\n\n" last,
// flushing after each so tokens reach the client as they are made.
type sseWriter struct {
	w     http.ResponseWriter
	rc    *http.ResponseController
	began bool // the headers went out; errors must now travel as events

	buf  []byte            // the event being written, reused (Write copies it out)
	tmpl api.ChunkTemplate // the stream's text-chunk encoding (internal/api/chunkjson.go)
	js   bytes.Buffer      // encoding/json's output for other chunks, reused
	enc  *json.Encoder     // onto js
}

func newSSE(w http.ResponseWriter) *sseWriter {
	return &sseWriter{w: w, rc: http.NewResponseController(w)}
}

// start sends the headers.
func (s *sseWriter) start() error {
	s.began = true
	h := s.w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // tell nginx-like proxies not to buffer the stream
	s.w.WriteHeader(http.StatusOK)
	return s.flush()
}

func (s *sseWriter) send(v any) error {
	buf := append(s.buf[:0], "data: "...)
	var ok bool
	if buf, ok = s.tmpl.AppendChunk(buf, v); !ok {
		if s.enc == nil {
			s.enc = json.NewEncoder(&s.js) // HTML escaping on, as json.Marshal
		}
		s.js.Reset()
		if err := s.enc.Encode(v); err != nil {
			return err
		}
		buf = append(buf, bytes.TrimSuffix(s.js.Bytes(), []byte("\n"))...)
	}
	buf = append(buf, "\n\n"...)
	s.buf = buf
	if _, err := s.w.Write(buf); err != nil {
		return err
	}
	return s.flush()
}

// sendError reports an error after the headers went out, as vLLM does: an error event, then
// [DONE].
func (s *sseWriter) sendError(err error) {
	_ = s.send(api.AsError(err).Body())
	_ = s.done()
}

func (s *sseWriter) done() error {
	if _, err := s.w.Write([]byte("data: [DONE]\n\n")); err != nil {
		return err
	}
	return s.flush()
}

func (s *sseWriter) flush() error {
	if err := s.rc.Flush(); err != nil && err != http.ErrNotSupported {
		return err
	}
	return nil
}
