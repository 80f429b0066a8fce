// Package espeak is the espeak_tts family: text to speech with the eSpeak NG
// library (libespeak-ng.so.1), driven through purego without cgo.
//
// A model entry names the espeak-ng data folder as its path (Debian:
// /usr/lib/x86_64-linux-gnu/espeak-ng-data), task "tts", mode "offline" or
// "streaming". Requests give the text as input and an espeak voice (a
// language name such as "en-us", "en", "de", "fr") as voice, or as language
// when voice is empty; load option "voice" sets the default (else "en").
// Options: "speed" or "speaking_rate" (multiplier of espeak's 175 words per
// minute, MinSpeed..MaxSpeed) and "pitch" (0..100, 50 = normal). Output is
// mono audio at the library's rate (22050 Hz): the same samples for the same
// request, equal to what `espeak-ng -w` writes before its end pause.
//
// libespeak-ng keeps all its state in globals, so every synthesis in the
// process is serialised by one mutex and each assets' Capacity is 1; each
// synthesis runs in a freshly loaded private copy of the library (see
// engine) because some of that state cannot be reset otherwise. Streaming
// requests get one audio event per buffer the library produces.
package espeak

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/audioproof/audioproof/server/apierror"
	"github.com/audioproof/audioproof/server/audio"
	"github.com/audioproof/audioproof/server/session"
)

// FamilyName is the name model entries use in "family".
const FamilyName = "espeak_tts"

// DefaultVoice is the voice used when neither the request nor the load
// option "voice" names one (espeak-ng's own default).
const DefaultVoice = "en"

// Speed and pitch ranges accepted in requests. espeak-ng 1.51 honours
// 80..450 words per minute on its own and clamps outside that; with its
// bundled sonic speed-up it goes faster. The accepted multipliers are the
// range where a different value still gives a different result.
const (
	MinSpeed = 80.0 / rateNormal // ≈0.457, espeakRATE_MINIMUM
	MaxSpeed = 4.0               // 700 wpm
	MinPitch = 0
	MaxPitch = 100
)

func init() { session.Register(Family{}) }

// Family is the espeak_tts model family.
type Family struct{}

// Name implements session.Family.
func (Family) Name() string { return FamilyName }

// Supports implements session.Family: tts, offline or streaming.
func (Family) Supports(task session.Task, mode session.Mode) bool {
	return task == session.TaskTTS && (mode == session.ModeOffline || mode == session.ModeStreaming)
}

// Load checks the data folder, initialises the library with it and reads its
// voices.
func (f Family) Load(ctx context.Context, env session.Env, spec session.Spec) (session.Assets, error) {
	if spec.Task != "" && !f.Supports(spec.Task, modeOrOffline(spec.Mode)) {
		return nil, fmt.Errorf("espeak_tts: task %q in mode %q is not supported (use task tts, mode offline or streaming)", spec.Task, spec.Mode)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	dataDir, err := resolveDataDir(spec.Path)
	if err != nil {
		return nil, err
	}
	table, rate, err := loadVoices(dataDir)
	if err != nil {
		return nil, err
	}
	a := &Assets{dataDir: dataDir, voices: table, names: sortedNames(table), rate: rate}
	want := spec.LoadOptions["voice"]
	if want == "" {
		want = DefaultVoice
	}
	v, ok := a.lookupVoice(want)
	if !ok {
		return nil, fmt.Errorf("espeak_tts: voice %q (load option voice, default %q) is not a voice of %s (known: %s)", want, DefaultVoice, displayDir(dataDir), sample(a.names))
	}
	a.defaultVoice = v
	return a, nil
}

// Voices implements session.VoiceLister: the voice names of the model's
// data folder, sorted and unique.
func (Family) Voices(spec session.Spec) ([]string, error) {
	dataDir, err := resolveDataDir(spec.Path)
	if err != nil {
		return nil, err
	}
	table, _, err := loadVoices(dataDir)
	if err != nil {
		return nil, err
	}
	return sortedNames(table), nil
}

func modeOrOffline(m session.Mode) session.Mode {
	if m == "" {
		return session.ModeOffline
	}
	return m
}

// loadVoices initialises espeak with dataDir and reads its voice table.
func loadVoices(dataDir string) (table map[string]string, rate int, err error) {
	eng.mu.Lock()
	defer eng.mu.Unlock()
	in, err := eng.openLocked(dataDir)
	if err != nil {
		return nil, 0, err
	}
	defer in.close()
	table = voiceTable(in.listVoices())
	if len(table) == 0 {
		return nil, 0, fmt.Errorf("espeak_tts: no voices found in %s: check the espeak-ng-data installation (Debian package espeak-ng-data)", displayDir(dataDir))
	}
	return table, in.rate, nil
}

func displayDir(d string) string {
	if d == "" {
		return "the default espeak-ng data folder"
	}
	return d
}

// sample lists a few names for error messages.
func sample(names []string) string {
	const n = 8
	if len(names) <= n {
		return strings.Join(names, ", ")
	}
	return strings.Join(names[:n], ", ") + fmt.Sprintf(", … (%d in all)", len(names))
}

// Assets are a loaded espeak_tts model: the data folder and its voices.
type Assets struct {
	dataDir      string
	voices       map[string]string // request name (lower case) → espeak identifier
	names        []string          // keys of voices, sorted
	rate         int
	defaultVoice voice
}

// voice is a resolved voice: the name the request used and the espeak
// identifier it selects.
type voice struct {
	name, id string
}

// Capacity implements session.Assets: espeak runs one synthesis at a time.
func (a *Assets) Capacity() int { return 1 }

// NewSession implements session.Assets.
func (a *Assets) NewSession() (session.Session, error) { return &Session{assets: a}, nil }

// Close implements session.Assets. The library stays loaded: it is global
// to the process and other models may use it.
func (a *Assets) Close() error { return nil }

// lookupVoice finds name among the voices, case-insensitively.
func (a *Assets) lookupVoice(name string) (voice, bool) {
	n := strings.ToLower(strings.TrimSpace(name))
	id, ok := a.voices[n]
	return voice{name: n, id: id}, ok
}

// Session runs syntheses for one model.
type Session struct {
	assets *Assets
}

// Close implements session.Session.
func (s *Session) Close() error { return nil }

// params is a validated request.
type params struct {
	text  string
	voice voice
	wpm   int
	pitch int
}

func (s *Session) parse(req *session.Request) (params, error) {
	p := params{text: req.Input, wpm: rateNormal, pitch: 50}
	if strings.TrimSpace(p.text) == "" {
		return p, apierror.Invalidf("input is required: give the text to speak")
	}
	if !utf8.ValidString(p.text) {
		return p, apierror.Invalidf("input is not valid UTF-8 text")
	}
	if strings.ContainsRune(p.text, 0) {
		return p, apierror.Invalidf("input contains a NUL character")
	}
	name, field := req.Voice, "voice"
	if name == "" {
		name, field = req.Language, "language"
	}
	if name == "" {
		p.voice = s.assets.defaultVoice
	} else {
		v, ok := s.assets.lookupVoice(name)
		if !ok {
			return p, apierror.Invalidf("unknown espeak voice %q (from %s): list the voices of this model with GET /v1/audio/voices?model=MODEL_ID (e.g. en-us, en, de, fr)", name, field)
		}
		p.voice = v
	}
	speedKey, speed := "", ""
	for _, k := range []string{"speed", "speaking_rate"} {
		if v, ok := req.Options[k]; ok {
			if speedKey != "" && v != speed {
				return p, apierror.Invalidf("options speed (%s) and speaking_rate (%s) disagree: give one of them", speed, v)
			}
			speedKey, speed = k, v
		}
	}
	if speedKey != "" {
		f, err := strconv.ParseFloat(strings.TrimSpace(speed), 64)
		if err != nil || math.IsNaN(f) || f < MinSpeed || f > MaxSpeed {
			return p, apierror.Invalidf("%s must be a number from %.3g to %g (1.0 = normal speed), got %q", speedKey, MinSpeed, MaxSpeed, speed)
		}
		p.wpm = int(math.Round(f * rateNormal))
	}
	if v, ok := req.Options["pitch"]; ok {
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || f != math.Trunc(f) || f < MinPitch || f > MaxPitch {
			return p, apierror.Invalidf("pitch must be a whole number from %d to %d (50 = normal), got %q", MinPitch, MaxPitch, v)
		}
		p.pitch = int(f)
	}
	return p, nil
}

// Run implements session.Session. For streaming requests every buffer the
// library produces is emitted as one audio event while synthesis goes on;
// the result always holds the whole audio.
func (s *Session) Run(ctx context.Context, req *session.Request, sink session.Sink) (*session.Result, error) {
	p, err := s.parse(req)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	rate := s.assets.rate
	syn := &synthesis{}
	syn.onChunk = func(chunk []float32) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if req.Stream && sink != nil {
			return sink.Emit(session.Event{Audio: &audio.Clip{SampleRate: rate, Channels: 1, Samples: slices.Clone(chunk)}})
		}
		return nil
	}
	if err := synthesize(s.assets.dataDir, p, syn); err != nil {
		return nil, err
	}
	if len(syn.samples) == 0 {
		return nil, apierror.Invalidf("espeak produced no audio for this input with voice %q", p.voice.name)
	}
	return &session.Result{
		Audio: &audio.Clip{SampleRate: rate, Channels: 1, Samples: syn.samples},
	}, nil
}

// synthesize runs one espeak_Synth under the process-wide lock, with every
// setting that espeak keeps between calls set afresh, so the output depends
// only on p.
func synthesize(dataDir string, p params, syn *synthesis) error {
	eng.mu.Lock()
	defer eng.mu.Unlock()
	in, err := eng.openLocked(dataDir)
	if err != nil {
		return err
	}
	defer in.close()
	f := &in.fns
	id := cString(p.voice.id)
	rc := f.setVoiceByName(id)
	runtime.KeepAlive(id)
	if rc != eeOK {
		if rc == eeNotFound {
			return fmt.Errorf("espeak cannot load voice %q (file %s): the data folder changed since the model was loaded; reload the model", p.voice.name, p.voice.id)
		}
		return fmt.Errorf("espeak_SetVoiceByName(%q) failed with code %d", p.voice.id, rc)
	}
	settings := [][2]int32{
		{paramRate, int32(p.wpm)}, {paramPitch, int32(p.pitch)}, {paramVolume, 100}, {paramRange, 50}, {paramWordGap, 0},
	}
	for _, kv := range settings {
		if rc := f.setParameter(kv[0], kv[1], 0); rc != eeOK {
			return fmt.Errorf("espeak_SetParameter(%d, %d) failed with code %d", kv[0], kv[1], rc)
		}
	}
	text := cString(p.text)
	eng.srand(randSeed)
	eng.current = syn
	rc = f.synth(text, uintptr(len(p.text)+1), 0, positionCharacter, 0, charsUTF8, nil, 0)
	eng.current = nil
	runtime.KeepAlive(text)
	if syn.err != nil {
		return syn.err
	}
	if rc != eeOK {
		return fmt.Errorf("espeak_Synth failed with code %d", rc)
	}
	return nil
}
