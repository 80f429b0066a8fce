package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/audioproof/audioproof/server/apierror"
)

// exchange is one request/response pair. It tracks when the handler is
// blocked on the socket so that Shutdown can cancel stalled I/O.
type exchange struct {
	s      *Server
	w      http.ResponseWriter
	r      *http.Request
	rc     *http.ResponseController
	start  time.Time
	status int

	ioSince atomic.Int64 // unix nanos when the current socket read/write began; 0 when none
	ioWrite atomic.Bool  // the blocked operation is a write

	wroteHeader bool
	sse         bool // an SSE stream has started: errors become error events
	rawStream   bool // a raw audio stream has started: errors just end it
}

func newExchange(s *Server, w http.ResponseWriter, r *http.Request) *exchange {
	return &exchange{s: s, w: w, r: r, rc: http.NewResponseController(w), start: time.Now()}
}

func (x *exchange) beginIO(write bool) {
	x.ioWrite.Store(write)
	x.ioSince.Store(time.Now().UnixNano())
}

func (x *exchange) endIO() { x.ioSince.Store(0) }

// cancelIfStalled expires the socket deadline of an operation that has been
// blocked for longer than stallSlice during shutdown.
func (x *exchange) cancelIfStalled(now time.Time) {
	since := x.ioSince.Load()
	if since == 0 || now.Sub(time.Unix(0, since)) < stallSlice {
		return
	}
	if x.ioWrite.Load() {
		_ = x.rc.SetWriteDeadline(now)
	} else {
		_ = x.rc.SetReadDeadline(now)
	}
}

// body reads the whole request body within the configured limit.
func (x *exchange) body() ([]byte, error) {
	limit := x.s.cfg.MaxRequestBodyBytes
	var rd io.Reader = x.r.Body
	if limit > 0 {
		if x.r.ContentLength > limit {
			return nil, tooLarge(limit)
		}
		rd = io.LimitReader(x.r.Body, limit+1)
	}
	x.beginIO(false)
	data, err := io.ReadAll(rd)
	x.endIO()
	if err != nil {
		return nil, apierror.Invalidf("cannot read request body: %v", err)
	}
	if limit > 0 && int64(len(data)) > limit {
		return nil, tooLarge(limit)
	}
	return data, nil
}

func tooLarge(limit int64) error {
	return apierror.TooLargef("request body is larger than max_request_body_bytes (%d bytes): send less audio or raise the limit in the config", limit)
}

func (x *exchange) setHeader(k, v string) { x.w.Header().Set(k, v) }

func (x *exchange) writeHeader(status int) {
	if x.wroteHeader {
		return
	}
	x.wroteHeader = true
	x.status = status
	x.w.WriteHeader(status)
}

func (x *exchange) write(p []byte) error {
	x.beginIO(true)
	_, err := x.w.Write(p)
	x.endIO()
	return err
}

func (x *exchange) flush() error {
	x.beginIO(true)
	err := x.rc.Flush()
	x.endIO()
	return err
}

// json writes a complete JSON response.
func (x *exchange) json(status int, body []byte) error {
	x.setHeader("Content-Type", "application/json")
	x.setHeader("Content-Length", fmt.Sprint(len(body)))
	x.writeHeader(status)
	return x.write(body)
}

// ok writes v (a value, or an ordered object) as a 200 JSON response.
func (x *exchange) ok(v any) error {
	b, err := marshal(v)
	if err != nil {
		return err
	}
	return x.json(http.StatusOK, b)
}

// fail reports err: the error envelope before the response started, an SSE
// error event inside an event stream, nothing inside a raw audio stream.
func (x *exchange) fail(err error) {
	e := apierror.From(err)
	if e.Status >= 500 && e.Type == apierror.TypeInternal {
		x.s.log.Error("request failed", "path", x.r.URL.Path, "err", err)
	}
	switch {
	case x.sse:
		_ = x.sseEvent(orderedObject{{"type", "error"}, {"error", orderedObject{{"message", e.Message}}}})
	case x.rawStream || x.wroteHeader:
		// headers are out: the stream just ends.
	default:
		x.json(e.Status, envelope(e))
	}
}

func envelope(e *apierror.Error) []byte {
	b, _ := json.Marshal(map[string]any{"error": map[string]string{"message": e.Message, "type": e.Type}})
	return b
}

// writeError writes the envelope outside an exchange (unknown routes).
func writeError(w http.ResponseWriter, err error) {
	e := apierror.From(err)
	b := envelope(e)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", fmt.Sprint(len(b)))
	w.WriteHeader(e.Status)
	w.Write(b)
}

// startSSE sends the headers of an event stream.
func (x *exchange) startSSE() error {
	x.setHeader("Content-Type", "text/event-stream")
	x.setHeader("Cache-Control", "no-cache")
	x.writeHeader(http.StatusOK)
	x.sse = true
	return x.flush()
}

// sseEvent writes one `data: <json>` event and flushes it.
func (x *exchange) sseEvent(v any) error {
	b, err := marshal(v)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	buf.WriteString("data: ")
	buf.Write(b)
	buf.WriteString("\n\n")
	if err := x.write(buf.Bytes()); err != nil {
		return err
	}
	return x.flush()
}

// sseDone ends an event stream with [DONE].
func (x *exchange) sseDone() error {
	if err := x.write([]byte("data: [DONE]\n\n")); err != nil {
		return err
	}
	return x.flush()
}

// errClientGone marks a failed socket write; the handler stops and releases.
var errClientGone = errors.New("httpapi: client disconnected")
