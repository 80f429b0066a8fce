// Package session is the contract between the runtimes and the model
// families. A Family loads immutable Assets once per model; the Assets create
// Sessions, each with private mutable state, and advertise how many
// independent sessions can run at the same time (Capacity).
//
// Runtimes never look inside a family: they load assets, create sessions,
// hand a session to exactly one request at a time and close everything in
// order (sessions before assets).
package session

import (
	"context"
	"log/slog"

	"github.com/audioproof/audioproof/server/audio"
	"github.com/audioproof/audioproof/server/ggml"
)

// Task is what a model does, by its wire code.
type Task string

// Tasks the server knows. Families declare which ones they serve.
const (
	TaskTTS  Task = "tts"
	TaskASR  Task = "asr"
	TaskVAD  Task = "vad"
	TaskDiar Task = "diar"
)

// ValidTasks are all task codes a config may name (the wire contract's list);
// a family still has to support the one it is given.
var ValidTasks = []Task{"vad", "asr", "diar", "sep", "gen", "tts", "clon", "vc", "s2s", "align", "vdes", "spk", "svc"}

// Mode is offline (whole result at once) or streaming (events as they come).
type Mode string

const (
	ModeOffline   Mode = "offline"
	ModeStreaming Mode = "streaming"
)

// Env is what the server gives every family: the selected compute backend
// and its settings. Compute is nil when the ggml libraries were not opened
// (tests of families that do not use ggml).
type Env struct {
	Backend string // "cpu", "vulkan", "cuda"
	Device  int
	Threads int
	Compute *ggml.Backend
	Logger  *slog.Logger
}

// Spec is the part of a model entry that a family loads from.
type Spec struct {
	ID             string
	Family         string
	Path           string // resolved, absolute when the config gave a relative path
	Task           Task
	Mode           Mode
	Config         string
	Weight         string
	LoadOptions    map[string]string
	SessionOptions map[string]string
}

// Family is one model implementation, registered by name.
type Family interface {
	Name() string
	// Supports reports whether the family serves task in mode.
	Supports(task Task, mode Mode) bool
	// Load reads the immutable assets (weights) once. It must not keep ctx.
	Load(ctx context.Context, env Env, spec Spec) (Assets, error)
}

// VoiceLister is implemented by families that have built-in voices.
type VoiceLister interface {
	Voices(spec Spec) ([]string, error)
}

// Assets are the immutable, shared part of a loaded model.
type Assets interface {
	// Capacity is how many sessions of these assets may run at the same
	// time on this backend, task and mode (1 when they cannot run
	// concurrently). The parallel runtime never creates more.
	Capacity() int
	// NewSession creates a session with private mutable state. The first
	// call makes the primary session, later calls its clones.
	NewSession() (Session, error)
	// Close frees the assets. Every session is closed before it.
	Close() error
}

// Session runs one request at a time with its own state.
type Session interface {
	// Run executes req. For streaming requests (req.Stream) the session
	// emits events to sink as they are produced and still returns the
	// complete result; sink is nil for offline requests. Errors from
	// apierror (such as Invalidf) are client errors; anything else is a 500.
	Run(ctx context.Context, req *Request, sink Sink) (*Result, error)
	Close() error
}

// BatchSession is implemented by sessions that run several requests in one
// native batch; each result is delivered through fn in index order.
type BatchSession interface {
	Session
	RunBatch(ctx context.Context, reqs []*Request, fn func(index int, res *Result, err error) error) error
}

// Sink receives streaming events. An error (client gone) stops the run.
type Sink interface {
	Emit(ev Event) error
}

// SinkFunc adapts a function to Sink.
type SinkFunc func(ev Event) error

// Emit calls f.
func (f SinkFunc) Emit(ev Event) error { return f(ev) }

// Event is one streaming increment.
type Event struct {
	TextDelta    string        // new transcript text
	Audio        *audio.Clip   // new audio samples
	SpeakerTurns []SpeakerTurn // new diarization turns
	SampleRate   int           // rate of sample offsets in SpeakerTurns
}

// Request is one inference request, already decoded by the HTTP layer.
type Request struct {
	Input         string // text to speak (tts) or prompt (asr)
	Language      string
	Voice         string
	VoiceRef      *audio.Clip
	ReferenceText string
	Audio         *audio.Clip       // input audio at its original rate and channels
	Options       map[string]string // default_request_options < session? < request options, stringified
	Stream        bool
}

// Option returns the request option key, or def when absent.
func (r *Request) Option(key, def string) string {
	if v, ok := r.Options[key]; ok {
		return v
	}
	return def
}

// Result is what a run produced. Zero fields are left out of responses.
type Result struct {
	Text         string
	Language     string
	Audio        *audio.Clip
	Segments     []Segment
	SpeakerTurns []SpeakerTurn
	Words        []Word
	SampleRate   int            // rate of the sample offsets above
	Extra        map[string]any // additional top-level response fields (e.g. "probabilities")
}

// Segment is a VAD segment in input-rate sample offsets.
type Segment struct {
	StartSample int64   `json:"start_sample"`
	EndSample   int64   `json:"end_sample"`
	Confidence  float64 `json:"confidence"`
	Text        string  `json:"text,omitempty"`
}

// SpeakerTurn is a diarization turn.
type SpeakerTurn struct {
	StartSample int64   `json:"start_sample"`
	EndSample   int64   `json:"end_sample"`
	SpeakerID   string  `json:"speaker_id"`
	Confidence  float64 `json:"confidence"`
	Text        string  `json:"text,omitempty"`
}

// Word is a timed word (ASR, alignment).
type Word struct {
	Word        string  `json:"word"`
	StartSample int64   `json:"start_sample"`
	EndSample   int64   `json:"end_sample"`
	Confidence  float64 `json:"confidence"`
}
