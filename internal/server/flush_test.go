package server

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
)

// failingFlusher is a ResponseWriter whose connection is gone: flushing fails.
type failingFlusher struct {
	*httptest.ResponseRecorder
	err error
}

func (f failingFlusher) FlushError() error { return f.err }

// TestFlushErrorReachesHandlers: the wrapper passes a failed flush on to
// http.ResponseController (so a stream learns its client is gone); it used to drop it.
func TestFlushErrorReachesHandlers(t *testing.T) {
	gone := errors.New("write: broken pipe")
	rw := &responseWriter{ResponseWriter: failingFlusher{httptest.NewRecorder(), gone}}
	if err := http.NewResponseController(rw).Flush(); !errors.Is(err, gone) {
		t.Errorf("Flush through the wrapper: %v, want %v", err, gone)
	}
	if !rw.wroteHeader || rw.status != http.StatusOK {
		t.Errorf("a flush sends the header: wroteHeader %v status %d", rw.wroteHeader, rw.status)
	}
	ok := &responseWriter{ResponseWriter: httptest.NewRecorder()}
	if err := http.NewResponseController(ok).Flush(); err != nil {
		t.Errorf("Flush on a live writer: %v", err)
	}
}
