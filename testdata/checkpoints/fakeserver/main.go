// Command fakeserver speaks enough of the audio.cpp wire contract for the
// checkpoint harness tests, and misbehaves on demand, so that each failure
// the harness must report can be provoked with a real process. Answers are
// deterministic: text and audio derive from the request and the model path's
// base name; timing values are random, as a real server's are.
//
// Faults (environment variables):
//
//	FAKE_FAIL_START=msg    print "audiocpp_server failed: msg" and exit 1
//	FAKE_NEVER_READY=1     listen, but answer /health with 503 forever
//	FAKE_NO_WARNING=1      no experimental-scope warning with --parallel-jobs
//	FAKE_WARN_ALWAYS=1     print the warning even without --parallel-jobs
//	FAKE_LEAK=1            parallel: active_slots stays 1 after the first request
//	FAKE_WRONG_SCHEMA=1    legacy lists slot fields; parallel omits them
//	FAKE_SUFFIX=s          append s to every text and change the audio
//	FAKE_DEVICES=line      --list-devices prints this line after "CPU"
//	FAKE_EXIT_STATUS=n     exit with status n on SIGTERM
//	FAKE_IGNORE_TERM=1     do not exit on SIGTERM
//	FAKE_HEALTH_BACKEND=b  report backend b in /health whatever --backend said
package main

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math/rand"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
)

type model struct {
	ID     string          `json:"id"`
	Family string          `json:"family"`
	Task   string          `json:"task"`
	Mode   string          `json:"mode"`
	Path   string          `json:"path"`
	Slots  json.RawMessage `json:"slots"`
	loaded bool
	leaked bool
}

type server struct {
	mu       sync.Mutex
	parallel bool
	backend  string
	models   []*model
}

func fail(msg string) {
	fmt.Fprintf(os.Stderr, "audiocpp_server failed: %s\n", msg)
	os.Exit(1)
}

func main() {
	var cfgPath, host, port, backend = "", "127.0.0.1", "8080", "cpu"
	parallel, list := false, false
	args := os.Args[1:]
	for i := 0; i < len(args); i++ {
		next := func() string {
			if i+1 >= len(args) {
				fail(args[i] + " needs a value")
			}
			i++
			return args[i]
		}
		switch args[i] {
		case "--config":
			cfgPath = next()
		case "--host":
			host = next()
		case "--port":
			port = next()
		case "--backend":
			backend = next()
		case "--parallel-jobs":
			parallel = true
		case "--list-devices":
			list = true
		default:
			fail("unknown flag " + args[i])
		}
	}
	if list {
		fmt.Println("CPU    cpu")
		if d := os.Getenv("FAKE_DEVICES"); d != "" {
			fmt.Println(d)
		}
		return
	}
	if msg := os.Getenv("FAKE_FAIL_START"); msg != "" {
		fail(msg)
	}
	data, err := os.ReadFile(cfgPath)
	if err != nil {
		fail(err.Error())
	}
	var cfg struct {
		Models []*model `json:"models"`
	}
	if err := json.Unmarshal(data, &cfg); err != nil {
		fail("config: " + err.Error())
	}
	for _, m := range cfg.Models {
		if !parallel && m.Slots != nil {
			fail("model " + m.ID + ": slots requires --parallel-jobs")
		}
	}
	if (parallel && os.Getenv("FAKE_NO_WARNING") == "") || os.Getenv("FAKE_WARN_ALWAYS") != "" {
		fmt.Fprintln(os.Stderr, "warning: --parallel-jobs is experimental (fake server)")
	}
	s := &server{parallel: parallel, backend: backend, models: cfg.Models}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, port))
	if err != nil {
		fail(err.Error())
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/health", s.health)
	mux.HandleFunc("/v1/models", s.list)
	mux.HandleFunc("/v1/models/unload", s.unload)
	mux.HandleFunc("/v1/audio/speech", s.speech)
	mux.HandleFunc("/v1/audio/transcriptions/details", s.details)
	srv := &http.Server{Handler: mux}
	go func() { _ = srv.Serve(ln) }()
	fmt.Printf("fake audiocpp listening on http://%s\n", ln.Addr())
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, os.Interrupt)
	for range sigs {
		if os.Getenv("FAKE_IGNORE_TERM") != "" {
			continue
		}
		break
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = srv.Shutdown(ctx)
	code, _ := strconv.Atoi(os.Getenv("FAKE_EXIT_STATUS"))
	os.Exit(code)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func apiError(w http.ResponseWriter, status int, typ, msg string) {
	writeJSON(w, status, map[string]any{"error": map[string]string{"message": msg, "type": typ}})
}

func (s *server) health(w http.ResponseWriter, r *http.Request) {
	if os.Getenv("FAKE_NEVER_READY") != "" {
		apiError(w, 503, "server_busy", "still loading")
		return
	}
	backend := s.backend
	if b := os.Getenv("FAKE_HEALTH_BACKEND"); b != "" {
		backend = b
	}
	writeJSON(w, 200, map[string]any{"status": "ok", "backend": backend, "models": len(s.models)})
}

func (s *server) find(id string) *model {
	for _, m := range s.models {
		if m.ID == id {
			return m
		}
	}
	return nil
}

func (s *server) list(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	data := []map[string]any{}
	wrong := os.Getenv("FAKE_WRONG_SCHEMA") != ""
	for _, m := range s.models {
		e := map[string]any{"id": m.ID, "object": "model", "owned_by": "engine", "family": m.Family,
			"task": m.Task, "mode": m.Mode, "loaded": m.loaded, "path": m.Path}
		if s.parallel != wrong {
			active := 0
			if m.leaked {
				active = 1
			}
			var mps any
			if m.loaded {
				mps = 1
			}
			e["slots"] = 1
			e["active_slots"] = active
			e["queued_requests"] = 0
			e["max_parallel_slots"] = mps
		}
		data = append(data, e)
	}
	writeJSON(w, 200, map[string]any{"object": "list", "data": data})
}

func (s *server) unload(w http.ResponseWriter, r *http.Request) {
	var req struct {
		ID string `json:"id"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		apiError(w, 400, "invalid_request_error", err.Error())
		return
	}
	s.mu.Lock()
	m := s.find(req.ID)
	if m != nil {
		m.loaded = false
	}
	s.mu.Unlock()
	if m == nil {
		apiError(w, 404, "not_found", "unknown model "+req.ID)
		return
	}
	writeJSON(w, 200, map[string]any{"id": req.ID, "loaded": false})
}

// use marks a model loaded (and leaks a slot when asked).
func (s *server) use(id string) *model {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.find(id)
	if m != nil {
		m.loaded = true
		if s.parallel && os.Getenv("FAKE_LEAK") != "" {
			m.leaked = true
		}
	}
	return m
}

func timing(w http.ResponseWriter) map[string]any {
	wall := rand.Intn(1000) + 1
	w.Header().Set("X-AudioCPP-Wall-Ms", strconv.Itoa(wall))
	w.Header().Set("X-AudioCPP-RTF", fmt.Sprintf("%.4f", rand.Float64()))
	return map[string]any{"wall_ms": wall, "audio_duration_ms": 250, "rtf": rand.Float64()}
}

func (s *server) speech(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Model          string `json:"model"`
		Input          string `json:"input"`
		ResponseFormat string `json:"response_format"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		apiError(w, 500, "server_error", err.Error())
		return
	}
	m := s.use(req.Model)
	if m == nil {
		apiError(w, 500, "server_error", "unknown model "+req.Model)
		return
	}
	seed := sha256.Sum256([]byte(filepath.Base(m.Path) + "|" + req.Input + "|" + os.Getenv("FAKE_SUFFIX")))
	wav := makeWAV(seed[:], 4000)
	t := timing(w)
	if req.ResponseFormat == "json" {
		writeJSON(w, 200, map[string]any{"audio": base64.StdEncoding.EncodeToString(wav), "format": "wav", "timing": t})
		return
	}
	w.Header().Set("Content-Type", "audio/wav")
	_, _ = w.Write(wav)
}

func makeWAV(seed []byte, n int) []byte {
	b := make([]byte, 44+2*n)
	copy(b, "RIFF")
	binary.LittleEndian.PutUint32(b[4:], uint32(36+2*n))
	copy(b[8:], "WAVEfmt ")
	binary.LittleEndian.PutUint32(b[16:], 16)
	binary.LittleEndian.PutUint16(b[20:], 1)
	binary.LittleEndian.PutUint16(b[22:], 1)
	binary.LittleEndian.PutUint32(b[24:], 16000)
	binary.LittleEndian.PutUint32(b[28:], 32000)
	binary.LittleEndian.PutUint16(b[32:], 2)
	binary.LittleEndian.PutUint16(b[34:], 16)
	copy(b[36:], "data")
	binary.LittleEndian.PutUint32(b[40:], uint32(2*n))
	for i := 0; i < n; i++ {
		v := int16(seed[i%len(seed)])*64 - 8192
		binary.LittleEndian.PutUint16(b[44+2*i:], uint16(v))
	}
	return b
}

func (s *server) details(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseMultipartForm(32 << 20); err != nil {
		apiError(w, 400, "invalid_request_error", err.Error())
		return
	}
	m := s.use(r.FormValue("model"))
	if m == nil {
		apiError(w, 500, "server_error", "unknown model")
		return
	}
	f, _, err := r.FormFile("file")
	if err != nil {
		apiError(w, 400, "invalid_request_error", "file is required")
		return
	}
	data, _ := io.ReadAll(f)
	n := int64(len(data)-44) / 2
	writeJSON(w, 200, map[string]any{
		"text":        filepath.Base(m.Path) + os.Getenv("FAKE_SUFFIX"),
		"segments":    []map[string]any{{"start_sample": n / 10, "end_sample": n - n/10, "confidence": 0.875}},
		"sample_rate": 16000,
		"timing":      timing(w),
	})
}
