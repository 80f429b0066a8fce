// Package silero is the silero_vad model family (task vad, offline): Silero
// VAD v5 run as ggml graphs on the selected backend (CPU, Vulkan, CUDA).
//
// Per request the audio is mixed to mono and resampled to 16 kHz, cut into
// 512-sample chunks (the last zero-padded, each preceded by the previous
// chunk's last 64 samples), and run through the network in blocks of up to
// 128 chunks: one graph per block computes the STFT and the encoder of every
// chunk at once (they do not depend on the recurrent state), then the LSTM
// unrolled over the block's chunks, then the decoder of every chunk at once.
// Each session builds a graph for each power-of-two block size it needs, once,
// and reuses it; the LSTM state (h, c) lives in a per-session buffer that the
// graph reads at its first step and writes back at its last, so blocks chain.
//
// Probabilities become segments with silero's get_speech_timestamps rules
// (package vad); options come from the request over the model's
// session_options. A segment's confidence is the mean speech probability of
// the 512-sample chunks it overlaps.
package silero

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"

	"github.com/audioproof/audioproof/server/families/silero/gguf"
	"github.com/audioproof/audioproof/server/families/silero/vad"
	"github.com/audioproof/audioproof/server/ggml"
	"github.com/audioproof/audioproof/server/session"
)

// FamilyName is the family's registered name.
const FamilyName = "silero_vad"

// Capacity is how many sessions may run at once on any backend: sessions
// share only the read-only weights.
const Capacity = 16

// DefaultWeightFile is the file looked for when a model's path is a folder.
const DefaultWeightFile = vad.GGUFName

func init() { session.Register(Family{}) }

// Family is the silero_vad model family.
type Family struct{}

// Name is "silero_vad".
func (Family) Name() string { return FamilyName }

// Supports reports task vad in offline mode.
func (Family) Supports(task session.Task, mode session.Mode) bool {
	return task == session.TaskVAD && mode == session.ModeOffline
}

// ErrNoCompute is returned by Load when the server has no ggml backend.
var ErrNoCompute = errors.New("silero_vad: ggml libraries not loaded: run make deps (or point --ggml-dir at a ggml build)")

// Load reads the GGUF weights at spec.Path (a file, or a folder holding
// spec.Weight or silero_vad_v5.gguf) and uploads them once to env.Compute.
func (Family) Load(ctx context.Context, env session.Env, spec session.Spec) (session.Assets, error) {
	if env.Compute == nil {
		return nil, ErrNoCompute
	}
	path, err := weightPath(spec)
	if err != nil {
		return nil, err
	}
	// Reject bad session options at load time: they are configuration.
	if _, err := vad.ParseOptions(spec.SessionOptions); err != nil {
		return nil, fmt.Errorf("silero_vad: model %q session_options: %w", spec.ID, err)
	}
	if _, err := returnProbabilities(spec.SessionOptions, nil); err != nil {
		return nil, fmt.Errorf("silero_vad: model %q session_options: %w", spec.ID, err)
	}
	f, err := gguf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("silero_vad: %w (make it with scripts/fetch-silero.sh)", err)
	}
	w, info, err := vad.FromGGUF(f)
	if err != nil {
		return nil, fmt.Errorf("silero_vad: %s: %w", path, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m, err := uploadWeights(env.Compute, w)
	if err != nil {
		return nil, fmt.Errorf("silero_vad: uploading weights to %s: %w", env.Compute, err)
	}
	log := env.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if env.Compute.Kind() == "vulkan" && os.Getenv("GGML_VK_DISABLE_F16") == "" {
		log.Warn("silero_vad on Vulkan without GGML_VK_DISABLE_F16=1: ggml-vulkan multiplies f32 matrices through f16 on devices with fp16, so probabilities can differ from the reference by ~1e-2; set GGML_VK_DISABLE_F16=1 before starting the server for 1e-3 or better",
			"model", spec.ID)
	}
	log.Info("silero_vad loaded", "model", spec.ID, "path", path, "backend", env.Compute.String(),
		"version", info.Version, "source", info.Source.Package, "sha256", info.Source.SHA256)
	return &Assets{backend: env.Compute, model: m, sessionOptions: spec.SessionOptions, log: log}, nil
}

func weightPath(spec session.Spec) (string, error) {
	if spec.Path == "" {
		return "", fmt.Errorf("silero_vad: model %q has no path; point it at %s (made by scripts/fetch-silero.sh)", spec.ID, DefaultWeightFile)
	}
	st, err := os.Stat(spec.Path)
	if err != nil {
		return "", fmt.Errorf("silero_vad: model %q: %w; run make deps (scripts/fetch-silero.sh) to fetch and convert the weights", spec.ID, err)
	}
	if !st.IsDir() {
		return spec.Path, nil
	}
	name := DefaultWeightFile
	if spec.Weight != "" {
		name = spec.Weight
	}
	p := filepath.Join(spec.Path, name)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("silero_vad: model %q: %w; run make deps (scripts/fetch-silero.sh)", spec.ID, err)
	}
	return p, nil
}

// Assets are the weights on the backend, shared by every session.
type Assets struct {
	backend        *ggml.Backend
	model          *model
	sessionOptions map[string]string
	log            *slog.Logger

	mu       sync.Mutex
	sessions int
	closed   bool
}

// Capacity is 16 on every backend.
func (a *Assets) Capacity() int { return Capacity }

// NewSession creates a session with its own compute stream, LSTM state and
// graphs.
func (a *Assets) NewSession() (session.Session, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil, errors.New("silero_vad: assets are closed")
	}
	s, err := newSession(a)
	if err != nil {
		return nil, err
	}
	a.sessions++
	return s, nil
}

func (a *Assets) sessionClosed() {
	a.mu.Lock()
	a.sessions--
	a.mu.Unlock()
}

// Close frees the weights. Every session must be closed first.
func (a *Assets) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil
	}
	if a.sessions > 0 {
		return fmt.Errorf("silero_vad: %d session(s) still open; close them before the assets", a.sessions)
	}
	a.closed = true
	return a.model.close()
}
