package hub

import (
	"context"
	"errors"
	"log"
	"net"
	"net/http"
	"net/http/pprof"
	"runtime"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/net/http2"

	"github.com/fleetwave/fleetwave/api"
)

// serverLimits are the limits of the API listener. newServer derives the
// settings of both protocols it serves from them, so a slow or greedy
// client is cut off at the same time whether it speaks HTTP/1.1 or h2c.
type serverLimits struct {
	// Header is the time a request's headers have to arrive. HTTP/1.1:
	// ReadHeaderTimeout. h2c has no deadline per header block, so the
	// connection is health-checked instead: no complete frame for Header/2
	// earns a PING, and a PING unanswered for Header/2 closes the
	// connection. A client dribbling a header block (or any frame) cannot
	// answer the PING in the middle of it, so it is cut off within Header
	// of its last complete frame; a healthy client answers at once.
	Header time.Duration
	// Body is the backstop of headers plus body (ReadTimeout); the API
	// sets each request's own body deadline (api.DefaultBodyTimeout), on
	// the connection for HTTP/1.1 and on the stream for h2c.
	Body time.Duration
	// Idle closes a connection without a request in flight (both
	// protocols: h2c sends GOAWAY, then closes).
	Idle time.Duration
	// Write closes an h2c connection that takes no byte for this long
	// while the hub has frames to send: the per-request write deadline the
	// API sets resets only its stream, and one connection carries many.
	// (An HTTP/1.1 request's write deadline is on its connection already.)
	Write time.Duration
	// Streams is the number of requests one h2c connection may have in
	// flight.
	Streams int
}

// defaultServerLimits are the hub's.
var defaultServerLimits = serverLimits{
	Header: 10 * time.Second,
	Body:   10*time.Second + api.DefaultBodyTimeout,
	// Agents poll again at once; a minute and a half of silence means the
	// client is gone.
	Idle:  90 * time.Second,
	Write: api.DefaultWriteTimeout,
	// Long polls are most of what is in flight, and a client multiplexing
	// them (a proxy, the fleet simulator) opens another connection when
	// one is full: 250 streams (Go's default) put 100,000 polls on 400
	// connections, far under the file limit. The hub holds a handler
	// goroutine per poll whatever the protocol.
	Streams: 250,
}

// newServer returns the API's HTTP server: HTTP/1.1 and unencrypted HTTP/2
// with prior knowledge (h2c) on the same listener; a connection speaks
// h2c when it opens with the HTTP/2 preface, read within lim.Header. The
// "Upgrade: h2c" handshake is not offered (RFC 9113 deprecates it). Its
// errors (accept failures, lost PINGs) are logged to l at warn level.
func newServer(handler http.Handler, lim serverLimits, l zerolog.Logger) *http.Server {
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	srv := &http.Server{
		Handler:           handler,
		Protocols:         protocols,
		ReadHeaderTimeout: lim.Header,
		// A backstop for headers plus body: the API sets each request's
		// body deadline (api.DefaultBodyTimeout) and write deadline itself;
		// no WriteTimeout, which would cut the agents' long poll (the API
		// gives it its wait plus the write time). Over h2c it bounds each
		// stream's body the same way.
		ReadTimeout: lim.Body,
		IdleTimeout: lim.Idle,
		// Bearer tokens and webhook signatures are short; 64 KiB is ample.
		// h2c announces it as SETTINGS_MAX_HEADER_LIST_SIZE.
		MaxHeaderBytes: 64 << 10,
		HTTP2: &http.HTTP2Config{
			MaxConcurrentStreams: lim.Streams,
			// Flow control windows bound what a client can make the hub
			// buffer before its handlers read it: 256 KiB a connection,
			// 64 KiB a request. Agents send reports of a few KiB, and the
			// handlers read bodies at once; a 1 MiB body (the API's cap)
			// still flows, a window at a time. With up to 20,000
			// connections (the file limit) the worst case is 5 GiB, where
			// the 1 MiB defaults would allow 20 GiB.
			MaxReceiveBufferPerConnection: 256 << 10,
			MaxReceiveBufferPerStream:     64 << 10,
			// The smallest frame HTTP/2 allows (also its initial value):
			// each connection keeps a read buffer of this size, as an
			// HTTP/1.1 connection keeps its 4 KiB one (the default, 1 MiB,
			// would let every client pin a megabyte).
			MaxReadFrameSize: 16 << 10,
			// HPACK tables stay at the protocol's 4 KiB: the tokens of the
			// agents sharing a connection all differ, so a larger decoder
			// table would hardly compress them, while each connection pins
			// the table a client fills; the answers' few headers repeat
			// and fit the encoder table.
			MaxDecoderHeaderTableSize: 4 << 10,
			MaxEncoderHeaderTableSize: 4 << 10,
			SendPingTimeout:           lim.Header / 2,
			PingTimeout:               lim.Header / 2,
			WriteByteTimeout:          lim.Write,
		},
		ErrorLog: log.New(errorLogWriter{l}, "", 0),
	}
	// HTTP/2 is served by golang.org/x/net/http2 (the code net/http
	// bundles) for one setting net/http does not offer: the write
	// scheduler. Its default keeps every open stream of a connection in a
	// ring and walks the ring for each frame it sends; a connection from a
	// proxy carries a held poll per agent behind it, all silent (7% of the
	// hub's CPU with 100,000 agents on 250 streams a connection). The
	// random scheduler holds only the streams with frames to send. Every
	// other setting is read from srv.HTTP2 as net/http reads it.
	if err := http2.ConfigureServer(srv, &http2.Server{NewWriteScheduler: func() http2.WriteScheduler {
		return http2.NewRandomWriteScheduler()
	}}); err != nil {
		// only a TLS configuration can fail it, and the hub has none
		panic("hub: configure HTTP/2: " + err.Error())
	}
	return srv
}

// errorLogWriter turns the lines net/http logs into structured warnings.
type errorLogWriter struct{ log zerolog.Logger }

func (w errorLogWriter) Write(p []byte) (int, error) {
	w.log.Warn().Str("error", strings.TrimSpace(string(p))).Msg("http server")
	return len(p), nil
}

// debugMux serves the Go runtime's profiles (net/http/pprof) under
// /debug/pprof/. It is its own mux: net/http/pprof also registers on
// http.DefaultServeMux, which the hub never serves.
func debugMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index) // and every named profile: heap, goroutine, allocs, ...
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// serveDebug serves the profiles on ln until ctx ends, then closes it.
// It returns nil when ctx ended it, or the server's error.
func serveDebug(ctx context.Context, ln net.Listener, l zerolog.Logger) error {
	srv := &http.Server{
		Handler:           debugMux(),
		ReadHeaderTimeout: 10 * time.Second,
		// No WriteTimeout: a CPU profile or trace writes after its
		// ?seconds= (net/http/pprof refuses one longer than WriteTimeout).
		IdleTimeout: 90 * time.Second,
		ErrorLog:    log.New(errorLogWriter{l}, "", 0),
	}
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-ctx.Done():
			_ = srv.Close()
		case <-done:
		}
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// runDebug serves the profiles on debug.listen, when set, until ctx ends.
// A listener that cannot be opened is logged and the hub runs on without
// profiles: they are a diagnostic aid, not part of the service.
func (h *Hub) runDebug(ctx context.Context) {
	if h.cfg.Debug.Listen == "" {
		return
	}
	l := h.log.With().Str("component", "debug").Logger()
	ln, err := net.Listen("tcp", h.cfg.Debug.Listen)
	if err != nil {
		l.Error().Err(err).Str("addr", h.cfg.Debug.Listen).Msg("debug listener not opened; profiles not served")
		return
	}
	if f := h.cfg.Debug.MutexProfileFraction; f > 0 {
		// process-wide: the rate before is restored when the hub stops
		defer runtime.SetMutexProfileFraction(runtime.SetMutexProfileFraction(f))
	}
	l.Info().Str("addr", ln.Addr().String()).Int("mutex_profile_fraction", h.cfg.Debug.MutexProfileFraction).Msg("serving profiles (net/http/pprof)")
	if err := serveDebug(ctx, ln, l); err != nil {
		l.Error().Err(err).Msg("debug listener stopped")
	}
}
