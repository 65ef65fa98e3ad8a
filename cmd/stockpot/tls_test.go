package main

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"stockpot/internal/router"
	"stockpot/internal/tlsconfig"
	"stockpot/internal/tlsconfig/tlstest"
)

// serveTLS serves inst over TLS on a loopback port until the test ends and returns its
// https URL.
func serveTLS(t *testing.T, inst *instance) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- inst.server.ServeHandler(ctx, ln, inst.handler(ctx)) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return "https://" + ln.Addr().String()
}

// TestTLSServeAndRoute: a replica serves mutual TLS (it admits only clients with a
// certificate from the router's CA), the router reaches it over https with its client
// certificate and the replica's events key (the kv-aware index syncs), and serves clients
// over TLS itself; the official openai-go client gets completions through the router,
// streamed and not. A client without a certificate cannot reach the replica directly.
func TestTLSServeAndRoute(t *testing.T) {
	ca := tlstest.NewCA(t, "stockpot-test")
	replicaLeaf, routerLeaf, routerClient := ca.Server("replica"), ca.Server("router"), ca.Client("router-client")
	replicaTLS, err := tlsconfig.Server(tlsconfig.ServerFiles{Cert: replicaLeaf.CertFile, Key: replicaLeaf.KeyFile, ClientCA: ca.CertFile})
	if err != nil {
		t.Fatal(err)
	}
	inst, _ := newTestInstance(t, func(o *serveOptions) {
		o.server.TLS = replicaTLS
		o.server.APIKeys, o.server.EventsKeys = []string{"backend-secret"}, []string{"events-secret"}
	})
	replicaURL := serveTLS(t, inst)

	backendTLS, err := tlsconfig.Client(tlsconfig.ClientFiles{CA: ca.CertFile, Cert: routerClient.CertFile, Key: routerClient.KeyFile})
	if err != nil {
		t.Fatal(err)
	}
	cfg := router.DefaultConfig()
	cfg.Backends = []string{replicaURL}
	cfg.APIKeys, cfg.BackendKey, cfg.BackendEventsKey = []string{"client-secret"}, "backend-secret", "events-secret"
	cfg.BackendTLS = backendTLS
	cfg.HealthInterval = 50 * time.Millisecond
	rt, err := router.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rt.Close)
	routerTLS, err := tlsconfig.Server(tlsconfig.ServerFiles{Cert: routerLeaf.CertFile, Key: routerLeaf.KeyFile})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, ln, err := rt.HTTPServer(raw, router.ServerConfig{TLS: routerTLS})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	routerURL := "https://" + raw.Addr().String()

	deadline := time.Now().Add(3 * time.Minute)
	for {
		st := rt.Backends()
		if len(st) == 1 && st[0].State == "healthy" && st[0].Events != nil && st[0].Events.Synced {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the router never synced the replica's events over mutual TLS: %+v", st)
		}
		time.Sleep(20 * time.Millisecond)
	}

	httpc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool}}}
	client := openai.NewClient(option.WithBaseURL(routerURL+"/v1/"), option.WithAPIKey("client-secret"),
		option.WithHTTPClient(httpc), option.WithMaxRetries(0))
	ctx := context.Background()
	params := openai.ChatCompletionNewParams{
		Model:     openai.ChatModel(inst.file.name),
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hello over TLS")},
		MaxTokens: openai.Int(4), Temperature: openai.Float(0),
	}
	resp, err := client.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatalf("chat through the router over TLS: %v", err)
	}
	if len(resp.Choices) != 1 || resp.Usage.CompletionTokens == 0 {
		t.Fatalf("chat: %+v", resp)
	}
	stream := client.Chat.Completions.NewStreaming(ctx, params)
	chunks := 0
	for stream.Next() {
		chunks++
	}
	if err := stream.Err(); err != nil || chunks == 0 {
		t.Fatalf("streamed chat over TLS: %d chunks, %v", chunks, err)
	}

	// Straight to the replica: trusted CA but no client certificate is refused at the
	// handshake; a plain-HTTP client gets no answer from the TLS port.
	direct := openai.NewClient(option.WithBaseURL(replicaURL+"/v1/"), option.WithAPIKey("backend-secret"),
		option.WithHTTPClient(httpc), option.WithMaxRetries(0))
	var apiErr *openai.Error
	if _, err := direct.Chat.Completions.New(ctx, params); err == nil {
		t.Fatal("the replica served a client without a certificate")
	} else if errors.As(err, &apiErr) {
		// An HTTP answer of any status means the handshake passed (the port's digits
		// are in the message, so the status is read from the error, not its text).
		t.Fatalf("refused by an HTTP %d, not by mutual TLS at the handshake: %v", apiErr.StatusCode, err)
	}
	// Why it was refused: under TLS 1.3 the client's handshake ends before the server
	// checks its certificate, so the HTTP client's error depends on whether its request
	// was written before the server's alert arrived (a reset, a closed connection, or the
	// alert). A connection that only reads always gets the alert itself.
	conn, err := tls.Dial("tcp", strings.TrimPrefix(replicaURL, "https://"), &tls.Config{RootCAs: ca.Pool})
	if err == nil {
		conn.SetReadDeadline(time.Now().Add(time.Minute))
		_, err = conn.Read(make([]byte, 1))
		conn.Close()
	}
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("refused, but not for the missing client certificate: %v", err)
	}
	apiErr = nil
	if _, err := client.Chat.Completions.New(ctx, params, option.WithAPIKey("wrong")); !errors.As(err, &apiErr) || apiErr.StatusCode != 401 {
		t.Fatalf("router with a wrong key over TLS: %v, want a 401", err)
	}
}

// TestTLSFlagsFailAtStart: serve and route refuse to start with TLS misconfigured, naming
// the flag.
func TestTLSFlagsFailAtStart(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	leaf := ca.Server("srv")
	for _, tc := range []struct {
		run  func([]string) error
		args []string
		want string
	}{
		{cmdServe, []string{"--tls-cert", leaf.CertFile}, "TLS needs both --tls-cert and --tls-key"},
		{cmdServe, []string{"--tls-cert", leaf.CertFile, "--tls-key", leaf.KeyFile, "--tls-client-ca", leaf.KeyFile}, "--tls-client-ca"},
		{cmdRoute, []string{"--tls-key", leaf.KeyFile}, "TLS needs both --tls-cert and --tls-key"},
		{cmdRoute, []string{"--backend-tls-cert", leaf.CertFile}, "--backend-tls-key"},
		{cmdRoute, []string{"--backend-tls-ca", ca.CertFile, "--backend", "http://127.0.0.1:1"}, "is not https://"},
	} {
		err := tc.run(tc.args)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error containing %q", tc.args, err, tc.want)
		}
	}
}
