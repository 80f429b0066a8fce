// Package httpapi is the HTTP transport: the audio.cpp server's wire
// contract (routes, error envelope, timing, CORS, SSE) over a runtime.
// It owns every request worker and drains them on Shutdown before the
// runtime may be closed.
package httpapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/audioproof/audioproof/runtimes"
	"github.com/audioproof/audioproof/server/apierror"
	"github.com/audioproof/audioproof/server/config"
)

// Options configure the API.
type Options struct {
	Config  *config.Config
	Runtime runtimes.Runtime
	Logger  *slog.Logger
	// LogRequests logs one line per request (the --log flag).
	LogRequests bool
}

// Server is the HTTP API: an http.Handler that also serves a listener and
// drains its workers on Shutdown.
type Server struct {
	cfg  *config.Config
	rt   runtimes.Runtime
	log  *slog.Logger
	mux  *http.ServeMux
	logR bool

	httpSrv  *http.Server
	workers  sync.WaitGroup // every request handler in flight
	inflight sync.Map       // *exchange -> struct{}
	closing  atomic.Bool

	// newConns holds connections that have not yet delivered a complete
	// request (http.StateNew): no worker owns them, so Shutdown closes them
	// instead of waiting the 5 s net/http gives them.
	newConns sync.Map // net.Conn -> time.Time (accepted)
}

// stallSlice is how long a socket read or write may block during shutdown
// before the server cancels it.
const stallSlice = 250 * time.Millisecond

// New builds the API over a runtime.
func New(o Options) *Server {
	s := &Server{cfg: o.Config, rt: o.Runtime, log: o.Logger, logR: o.LogRequests}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.mux = http.NewServeMux()
	s.routes()
	s.httpSrv = &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 30 * time.Second,
		ConnState:         s.trackConn,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	return s
}

func (s *Server) routes() {
	get := func(path string, h handlerFunc) { s.mux.Handle("GET "+path, s.wrap(h)) }
	post := func(path string, h handlerFunc) { s.mux.Handle("POST "+path, s.wrap(h)) }
	get("/health", s.health)
	get("/v1/models", s.listModels)
	get("/v1/audio/voices", s.voices)
	post("/v1/audio/speech", s.speech)
	post("/v1/audio/transcriptions", s.transcriptions(false))
	post("/v1/audio/transcriptions/details", s.transcriptions(true))
	post("/v1/batches/transcriptions", s.batchTranscriptions)
	post("/v1/tasks/run", s.taskRun)
	post("/v1/tasks/stream", s.taskStream)
	post("/v1/tasks/batch", s.taskBatch)
	post("/v1/models/load", s.loadModel)
	post("/v1/models/unload", s.unloadModel)
	post("/v1/tasks/unload_models", s.unloadModels)
	post("/v1/tasks/unload_all_models", s.unloadAllModels)
}

// handlerFunc handles one exchange; a returned error is written as the
// error envelope (or as an SSE error event once a stream has started).
type handlerFunc func(x *exchange) error

// ServeHTTP applies the connection policy and CORS, then routes.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Connection", "close")
	if s.cfg.CORSOrigins == "*" {
		if origin := r.Header.Get("Origin"); origin != "" {
			w.Header().Set("Access-Control-Allow-Origin", origin)
		}
		if r.Method == http.MethodOptions {
			w.Header().Set("Access-Control-Allow-Headers", "*")
			w.Header().Set("Access-Control-Allow-Methods", "GET, POST")
			w.WriteHeader(http.StatusNoContent)
			return
		}
	}
	if _, pattern := s.mux.Handler(r); pattern == "" {
		if allowed := s.methodsFor(r); allowed != "" {
			w.Header().Set("Allow", allowed)
			writeError(w, &apierror.Error{Status: http.StatusMethodNotAllowed, Type: apierror.TypeInvalid,
				Message: fmt.Sprintf("method %s is not allowed on %s: use %s", r.Method, r.URL.Path, allowed)})
			return
		}
		writeError(w, apierror.NotFoundf("unknown endpoint: %s", r.URL.Path))
		return
	}
	s.mux.ServeHTTP(w, r)
}

// methodsFor names the methods the path does answer ("" for an unknown path).
func (s *Server) methodsFor(r *http.Request) string {
	var allowed []string
	for _, m := range []string{http.MethodGet, http.MethodPost} {
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, pattern := s.mux.Handler(probe); pattern != "" {
			allowed = append(allowed, m)
		}
	}
	return strings.Join(allowed, ", ")
}

func (s *Server) wrap(h handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.workers.Add(1)
		defer s.workers.Done()
		x := newExchange(s, w, r)
		s.inflight.Store(x, struct{}{})
		defer s.inflight.Delete(x)
		start := time.Now()
		err := s.runHandler(h, x)
		if err != nil {
			x.fail(err)
		}
		if s.logR {
			s.log.Info("request", "method", r.Method, "path", r.URL.Path, "status", x.status, "ms", time.Since(start).Milliseconds())
		}
	})
}

// runHandler turns a handler panic into a 500 so that deferred releases run
// and the client still gets an envelope.
func (s *Server) runHandler(h handlerFunc, x *exchange) (err error) {
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("handler panic", "path", x.r.URL.Path, "panic", p)
			err = apierror.Internalf("internal error: %v", p)
		}
	}()
	return h(x)
}

func (s *Server) trackConn(c net.Conn, state http.ConnState) {
	if state == http.StateNew {
		s.newConns.Store(c, time.Now())
	} else {
		s.newConns.Delete(c)
	}
}

// Serve accepts connections on l until Shutdown.
func (s *Server) Serve(l net.Listener) error {
	err := s.httpSrv.Serve(l)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Shutdown stops accepting, cancels socket reads and writes that stall for
// more than a short slice, and waits for every request worker (including
// streams and batches, which run inside their handlers). Admitted work is
// allowed to finish; hung backend calls are not cancelled. The runtime may be
// closed once Shutdown returns.
func (s *Server) Shutdown(ctx context.Context) error {
	s.closing.Store(true)
	stop := make(chan struct{})
	go s.cancelStalledIO(stop)
	defer close(stop)
	err := s.httpSrv.Shutdown(ctx)
	done := make(chan struct{})
	go func() { s.workers.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return ctx.Err()
	}
	return err
}

// ShuttingDown reports whether Shutdown has begun.
func (s *Server) ShuttingDown() bool { return s.closing.Load() }

func (s *Server) cancelStalledIO(stop <-chan struct{}) {
	t := time.NewTicker(stallSlice / 5)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		now := time.Now()
		s.newConns.Range(func(k, v any) bool {
			if now.Sub(v.(time.Time)) >= stallSlice {
				k.(net.Conn).Close()
			}
			return true
		})
		s.inflight.Range(func(k, _ any) bool {
			k.(*exchange).cancelIfStalled(now)
			return true
		})
	}
}

func hasBoundary(contentType string) bool {
	return strings.Contains(strings.ToLower(contentType), "boundary=")
}
