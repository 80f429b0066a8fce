package espeak

import (
	"context"
	"errors"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/audioproof/audioproof/server/apierror"
	"github.com/audioproof/audioproof/server/audio"
	"github.com/audioproof/audioproof/server/session"
)

// debianDataDir is where Debian's espeak-ng-data package puts the data.
const debianDataDir = "/usr/lib/x86_64-linux-gnu/espeak-ng-data"

// dataDir is the data folder the tests use: $AUDIOPROOF_ESPEAK_DATA or
// Debian's. Without the library or the data the tests skip, except in CI
// (CI=true), where `make deps` must have installed them.
func dataDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("AUDIOPROOF_ESPEAK_DATA")
	if dir == "" {
		dir = debianDataDir
	}
	eng.mu.Lock()
	err := eng.prepareLocked()
	eng.mu.Unlock()
	if err == nil && !isDataDir(dir) {
		err = errors.New(dir + " is not an espeak-ng data folder")
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("espeak-ng is required in CI: %v", err)
		}
		t.Skipf("espeak-ng not available (%v): run `make deps`", err)
	}
	return dir
}

func load(t *testing.T, spec session.Spec) *Assets {
	t.Helper()
	if spec.Path == "" {
		spec.Path = dataDir(t)
	}
	if spec.Task == "" {
		spec.Task = session.TaskTTS
	}
	a, err := Family{}.Load(context.Background(), session.Env{}, spec)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	t.Cleanup(func() { a.Close() })
	return a.(*Assets)
}

func newSession(t *testing.T, a *Assets) session.Session {
	t.Helper()
	s, err := a.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func speak(t *testing.T, s session.Session, req *session.Request) *audio.Clip {
	t.Helper()
	res, err := s.Run(context.Background(), req, nil)
	if err != nil {
		t.Fatalf("Run(%+v): %v", req, err)
	}
	if res.Audio == nil {
		t.Fatal("no audio in result")
	}
	return res.Audio
}

func rms(s []float32) float64 {
	var sum float64
	for _, v := range s {
		sum += float64(v) * float64(v)
	}
	return math.Sqrt(sum / float64(max(len(s), 1)))
}

func zeroCrossingRate(s []float32) float64 {
	n := 0
	for i := 1; i < len(s); i++ {
		if (s[i-1] < 0) != (s[i] < 0) {
			n++
		}
	}
	return float64(n) / float64(len(s))
}

func TestRegistered(t *testing.T) {
	f, ok := session.Lookup(FamilyName)
	if !ok {
		t.Fatal("espeak_tts is not registered")
	}
	if _, ok := f.(session.VoiceLister); !ok {
		t.Fatal("espeak_tts does not list voices")
	}
	if !f.Supports(session.TaskTTS, session.ModeOffline) || !f.Supports(session.TaskTTS, session.ModeStreaming) {
		t.Fatal("tts offline/streaming must be supported")
	}
	if f.Supports(session.TaskASR, session.ModeOffline) {
		t.Fatal("asr must not be supported")
	}
}

func TestHelloWorld(t *testing.T) {
	a := load(t, session.Spec{})
	if a.Capacity() != 1 {
		t.Fatalf("capacity %d, want 1", a.Capacity())
	}
	c := speak(t, newSession(t, a), &session.Request{Input: "hello world", Voice: "en-us"})
	if c.SampleRate != 22050 || c.Channels != 1 {
		t.Fatalf("got %d Hz × %d channels, want 22050 mono", c.SampleRate, c.Channels)
	}
	if d := c.Duration().Seconds(); d < 0.5 || d > 3 {
		t.Fatalf("hello world lasts %.2f s, want 0.5..3", d)
	}
	if r := rms(c.Samples); r < 0.02 {
		t.Fatalf("RMS %.4f: speech should not be near silence", r)
	}
	for i, v := range c.Samples {
		if v < -1 || v > 1 {
			t.Fatalf("sample %d = %v out of range", i, v)
		}
	}
}

// TestDeterministic: the same request gives the same samples, also after
// other requests changed voice, speed and pitch in between.
func TestDeterministic(t *testing.T) {
	s := newSession(t, load(t, session.Spec{}))
	req := &session.Request{Input: "The quick brown fox jumps over the lazy dog.", Voice: "en-us"}
	first := speak(t, s, req)
	speak(t, s, &session.Request{Input: "Guten Tag, wie geht es Ihnen?", Voice: "de", Options: map[string]string{"speed": "2", "pitch": "90"}})
	second := speak(t, s, req)
	if !slices.Equal(first.Samples, second.Samples) {
		t.Fatal("two syntheses of the same request differ")
	}
	// Latvian has breath noise, drawn from libc's rand().
	lv := &session.Request{Input: "Labdien, kā jums klājas?", Voice: "lv"}
	first = speak(t, s, lv)
	speak(t, s, &session.Request{Input: "Paldies, labi.", Voice: "lv"})
	second = speak(t, s, lv)
	if !slices.Equal(first.Samples, second.Samples) {
		t.Fatal("two syntheses of a breathy voice differ: rand() is not reseeded")
	}
}

// TestMatchesCommandLine compares with `espeak-ng -w`, which synthesises
// once in a fresh process: same samples, then the end pause the command
// line adds.
func TestMatchesCommandLine(t *testing.T) {
	dir := dataDir(t)
	bin, err := exec.LookPath("espeak-ng")
	if err != nil {
		t.Skip("espeak-ng command not installed")
	}
	s := newSession(t, load(t, session.Spec{Path: dir}))
	for _, tc := range []struct {
		voice, speed string
		wpm          int
	}{{"en-us", "1", 175}, {"fr", "2", 350}, {"lv", "1", 175}} {
		out := filepath.Join(t.TempDir(), "cli.wav")
		text := "hello world, this is a test"
		cmd := exec.Command(bin, "--path="+filepath.Dir(dir), "-v", tc.voice, "-s", strconv.Itoa(tc.wpm), "-w", out, text)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", cmd, err, b)
		}
		wav, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		cli, err := audio.DecodeWAV(wav, audio.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		got := speak(t, s, &session.Request{Input: text, Voice: tc.voice, Options: map[string]string{"speed": tc.speed}})
		if len(cli.Samples) < len(got.Samples) {
			t.Fatalf("%s: command line gave %d samples, we %d", tc.voice, len(cli.Samples), len(got.Samples))
		}
		if !slices.Equal(got.Samples, cli.Samples[:len(got.Samples)]) {
			t.Fatalf("%s: samples differ from espeak-ng -w", tc.voice)
		}
		if r := rms(cli.Samples[len(got.Samples):]); r > 1e-3 {
			t.Fatalf("%s: the command line's extra tail is not a pause (RMS %v)", tc.voice, r)
		}
	}
}

func TestVoices(t *testing.T) {
	dir := dataDir(t)
	names, err := Family{}.Voices(session.Spec{Path: dir})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.IsSorted(names) || len(slices.Compact(slices.Clone(names))) != len(names) {
		t.Fatal("voices are not sorted and unique")
	}
	for _, want := range []string{"en-us", "en", "de", "fr", "en-gb", "zh"} {
		if _, ok := slices.BinarySearch(names, want); !ok {
			t.Errorf("voice %q missing from %v", want, names)
		}
	}
	if len(names) < 50 {
		t.Errorf("only %d voices", len(names))
	}
	// Every listed name synthesises.
	s := newSession(t, load(t, session.Spec{Path: dir}))
	for _, n := range []string{"en-gb", "zh", "fr-fr", "EN-US"} {
		if c := speak(t, s, &session.Request{Input: "one two", Voice: n}); rms(c.Samples) < 0.01 {
			t.Errorf("voice %s: silence", n)
		}
	}
}

func TestVoiceLanguageAndDefault(t *testing.T) {
	s := newSession(t, load(t, session.Spec{}))
	text := "bonjour"
	byVoice := speak(t, s, &session.Request{Input: text, Voice: "fr"})
	byLang := speak(t, s, &session.Request{Input: text, Language: "fr"})
	if !slices.Equal(byVoice.Samples, byLang.Samples) {
		t.Fatal("language fr should select the fr voice")
	}
	voiceWins := speak(t, s, &session.Request{Input: text, Voice: "fr", Language: "de"})
	if !slices.Equal(byVoice.Samples, voiceWins.Samples) {
		t.Fatal("voice must win over language")
	}
	def := speak(t, s, &session.Request{Input: text})
	en := speak(t, s, &session.Request{Input: text, Voice: DefaultVoice})
	if !slices.Equal(def.Samples, en.Samples) || slices.Equal(def.Samples, byVoice.Samples) {
		t.Fatal("no voice should use the default voice en")
	}
	de := load(t, session.Spec{LoadOptions: map[string]string{"voice": "de"}})
	got := speak(t, newSession(t, de), &session.Request{Input: text})
	want := speak(t, s, &session.Request{Input: text, Voice: "de"})
	if !slices.Equal(got.Samples, want.Samples) {
		t.Fatal("load option voice=de should be the default")
	}
}

func TestSpeedAndPitch(t *testing.T) {
	s := newSession(t, load(t, session.Spec{}))
	text := "This sentence is long enough to measure how fast it is spoken."
	normal := speak(t, s, &session.Request{Input: text, Voice: "en-us"})
	fast := speak(t, s, &session.Request{Input: text, Voice: "en-us", Options: map[string]string{"speed": "2"}})
	alias := speak(t, s, &session.Request{Input: text, Voice: "en-us", Options: map[string]string{"speaking_rate": "2"}})
	slow := speak(t, s, &session.Request{Input: text, Voice: "en-us", Options: map[string]string{"speed": "0.5"}})
	if r := fast.Duration().Seconds() / normal.Duration().Seconds(); r < 0.4 || r > 0.65 {
		t.Errorf("speed 2: duration ratio %.2f, want about 0.5", r)
	}
	if r := slow.Duration().Seconds() / normal.Duration().Seconds(); r < 1.6 || r > 2.4 {
		t.Errorf("speed 0.5: duration ratio %.2f, want about 2", r)
	}
	if !slices.Equal(fast.Samples, alias.Samples) {
		t.Error("speaking_rate must act like speed")
	}
	same := speak(t, s, &session.Request{Input: text, Voice: "en-us", Options: map[string]string{"speed": "2", "speaking_rate": "2"}})
	if !slices.Equal(fast.Samples, same.Samples) {
		t.Error("equal speed and speaking_rate must be accepted")
	}
	low := speak(t, s, &session.Request{Input: text, Voice: "en-us", Options: map[string]string{"pitch": "0"}})
	high := speak(t, s, &session.Request{Input: text, Voice: "en-us", Options: map[string]string{"pitch": "100"}})
	if zl, zh := zeroCrossingRate(low.Samples), zeroCrossingRate(high.Samples); zh <= zl {
		t.Errorf("pitch 100 should raise the zero-crossing rate over pitch 0 (%.4f vs %.4f)", zh, zl)
	}
	mid := speak(t, s, &session.Request{Input: text, Voice: "en-us", Options: map[string]string{"pitch": "50"}})
	if !slices.Equal(mid.Samples, normal.Samples) {
		t.Error("pitch 50 must be the default")
	}
}

func TestRequestErrors(t *testing.T) {
	s := newSession(t, load(t, session.Spec{}))
	opt := func(kv ...string) map[string]string {
		m := map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	cases := []struct {
		name string
		req  session.Request
		msg  string
	}{
		{"empty", session.Request{Input: ""}, "input is required"},
		{"blank", session.Request{Input: " \n\t"}, "input is required"},
		{"bad utf8", session.Request{Input: "hi \xff"}, "not valid UTF-8"},
		{"nul", session.Request{Input: "hi\x00there"}, "NUL"},
		{"unknown voice", session.Request{Input: "hi", Voice: "klingon"}, `unknown espeak voice "klingon" (from voice): list the voices of this model with GET /v1/audio/voices`},
		{"unknown language", session.Request{Input: "hi", Language: "xx-yy"}, `unknown espeak voice "xx-yy" (from language)`},
		{"speed zero", session.Request{Input: "hi", Options: opt("speed", "0")}, "speed must be a number from 0.457 to 4"},
		{"speed negative", session.Request{Input: "hi", Options: opt("speed", "-1")}, "speed must be"},
		{"speed too slow", session.Request{Input: "hi", Options: opt("speed", "0.3")}, "speed must be"},
		{"speed too fast", session.Request{Input: "hi", Options: opt("speed", "4.5")}, "speed must be"},
		{"speed text", session.Request{Input: "hi", Options: opt("speed", "fast")}, `got "fast"`},
		{"speed nan", session.Request{Input: "hi", Options: opt("speed", "NaN")}, "speed must be"},
		{"rate bad", session.Request{Input: "hi", Options: opt("speaking_rate", "9")}, "speaking_rate must be"},
		{"speed disagree", session.Request{Input: "hi", Options: opt("speed", "1", "speaking_rate", "2")}, "disagree"},
		{"pitch high", session.Request{Input: "hi", Options: opt("pitch", "101")}, "pitch must be a whole number from 0 to 100"},
		{"pitch negative", session.Request{Input: "hi", Options: opt("pitch", "-1")}, "pitch must be"},
		{"pitch fraction", session.Request{Input: "hi", Options: opt("pitch", "5.5")}, "pitch must be"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.Run(context.Background(), &tc.req, nil)
			var ae *apierror.Error
			if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest {
				t.Fatalf("got %v, want a 400", err)
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("error %q does not contain %q", err, tc.msg)
			}
		})
	}
}

func TestLoadErrors(t *testing.T) {
	dir := dataDir(t)
	ctx := context.Background()
	cases := []struct {
		name string
		spec session.Spec
		msg  string
	}{
		{"missing path", session.Spec{Path: filepath.Join(t.TempDir(), "nope")}, "no such file"},
		{"not data", session.Spec{Path: t.TempDir()}, "is not an espeak-ng data folder"},
		{"bad default voice", session.Spec{Path: dir, LoadOptions: map[string]string{"voice": "klingon"}}, `voice "klingon"`},
		{"wrong task", session.Spec{Path: dir, Task: session.TaskASR}, "not supported"},
	}
	for _, tc := range cases {
		if _, err := (Family{}).Load(ctx, session.Env{}, tc.spec); err == nil || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: got %v, want an error containing %q", tc.name, err, tc.msg)
		}
	}
}

// TestDataFolderParent: a folder that contains espeak-ng-data works like
// the data folder itself.
func TestDataFolderParent(t *testing.T) {
	dir := dataDir(t)
	parent := t.TempDir()
	if err := os.Symlink(dir, filepath.Join(parent, "espeak-ng-data")); err != nil {
		t.Fatal(err)
	}
	direct := speak(t, newSession(t, load(t, session.Spec{Path: dir})), &session.Request{Input: "parent folder", Voice: "en"})
	viaParent := speak(t, newSession(t, load(t, session.Spec{Path: parent})), &session.Request{Input: "parent folder", Voice: "en"})
	if !slices.Equal(direct.Samples, viaParent.Samples) {
		t.Fatal("the parent folder gives different audio")
	}
}

// TestConcurrent: syntheses started at the same time from two models give
// what they give one after the other (the process-wide lock holds).
func TestConcurrent(t *testing.T) {
	a, b := load(t, session.Spec{}), load(t, session.Spec{})
	reqs := []*session.Request{
		{Input: "First speaker says something rather long, to overlap.", Voice: "en-us"},
		{Input: "Der zweite Sprecher spricht gleichzeitig.", Voice: "de", Options: map[string]string{"speed": "1.5"}},
	}
	sessions := []session.Session{newSession(t, a), newSession(t, b)}
	var want [2][]float32
	for i := range reqs {
		want[i] = speak(t, sessions[i], reqs[i]).Samples
	}
	const rounds = 4
	var wg sync.WaitGroup
	errs := make(chan error, 2*rounds)
	for i := range reqs {
		wg.Go(func() {
			for range rounds {
				res, err := sessions[i].Run(context.Background(), reqs[i], nil)
				if err != nil {
					errs <- err
					return
				}
				if !slices.Equal(res.Audio.Samples, want[i]) {
					errs <- errors.New("concurrent synthesis of request " + strconv.Itoa(i) + " differs from sequential")
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestStreaming(t *testing.T) {
	s := newSession(t, load(t, session.Spec{Mode: session.ModeStreaming}))
	text := "Streaming sends the audio in pieces while it is made."
	offline := speak(t, s, &session.Request{Input: text, Voice: "en-us"})
	var chunks [][]float32
	sink := session.SinkFunc(func(ev session.Event) error {
		if ev.Audio == nil || ev.Audio.SampleRate != 22050 || ev.Audio.Channels != 1 || len(ev.Audio.Samples) == 0 {
			t.Errorf("bad event %+v", ev)
			return nil
		}
		chunks = append(chunks, ev.Audio.Samples)
		return nil
	})
	res, err := s.Run(context.Background(), &session.Request{Input: text, Voice: "en-us", Stream: true}, sink)
	if err != nil {
		t.Fatal(err)
	}
	if len(chunks) < 3 {
		t.Fatalf("%d chunks, want several", len(chunks))
	}
	if joined := slices.Concat(chunks...); !slices.Equal(joined, offline.Samples) {
		t.Fatalf("chunks join to %d samples that differ from the offline %d", len(joined), len(offline.Samples))
	}
	if !slices.Equal(res.Audio.Samples, offline.Samples) {
		t.Fatal("streaming result differs from offline")
	}

	// A sink error (client gone) stops the synthesis and is returned.
	gone := errors.New("client gone")
	calls := 0
	_, err = s.Run(context.Background(), &session.Request{Input: text, Voice: "en-us", Stream: true}, session.SinkFunc(func(session.Event) error {
		calls++
		return gone
	}))
	if !errors.Is(err, gone) || calls != 1 {
		t.Fatalf("got %v after %d events, want the sink error after 1", err, calls)
	}
	// A cancelled context stops it too; the engine stays usable.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Run(ctx, &session.Request{Input: text}, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled run: %v", err)
	}
	again := speak(t, s, &session.Request{Input: text, Voice: "en-us"})
	if !slices.Equal(again.Samples, offline.Samples) {
		t.Fatal("synthesis after an aborted one differs")
	}
}

// TestNoLeak: every synthesis loads and unloads a copy of the library;
// memory must not grow with the number of syntheses.
func TestNoLeak(t *testing.T) {
	s := newSession(t, load(t, session.Spec{}))
	req := &session.Request{Input: "memory", Voice: "en"}
	speak(t, s, req)
	before := rssKB(t)
	for range 150 {
		speak(t, s, req)
	}
	if grown := rssKB(t) - before; grown > 40*1024 {
		t.Fatalf("RSS grew by %d KiB over 150 syntheses", grown)
	}
}

func rssKB(t *testing.T) int {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skip("no /proc/self/status")
	}
	for line := range strings.Lines(string(b)) {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			n, _ := strconv.Atoi(f[1])
			return n
		}
	}
	t.Skip("no VmRSS")
	return 0
}

func TestLibraryMissing(t *testing.T) {
	saved := libName
	libName = "libespeak-ng-does-not-exist.so.9"
	defer func() { libName = saved }()
	var e engine
	err := e.prepareLocked()
	if !errors.Is(err, errLibMissing) || !strings.Contains(err.Error(), "run `make deps` (installs the Debian package libespeak-ng1)") {
		t.Fatalf("got %v", err)
	}
}

func TestVoiceStructLayout(t *testing.T) {
	var v cVoice
	offsets := []struct {
		name     string
		got, off uintptr
	}{
		{"name", unsafe.Offsetof(v.name), 0}, {"languages", unsafe.Offsetof(v.languages), 8},
		{"identifier", unsafe.Offsetof(v.identifier), 16}, {"gender", unsafe.Offsetof(v.gender), 24},
		{"age", unsafe.Offsetof(v.age), 25}, {"variant", unsafe.Offsetof(v.variant), 26},
		{"xx1", unsafe.Offsetof(v.xx1), 27}, {"score", unsafe.Offsetof(v.score), 28},
		{"spare", unsafe.Offsetof(v.spare), 32},
	}
	for _, o := range offsets {
		if o.got != o.off {
			t.Errorf("espeak_VOICE.%s at offset %d, want %d", o.name, o.got, o.off)
		}
	}
	if unsafe.Sizeof(v) != 40 {
		t.Errorf("espeak_VOICE size %d, want 40", unsafe.Sizeof(v))
	}
}

func TestParseLanguagesAndTable(t *testing.T) {
	raw := []byte("\x02en-gb\x00\x03en\x00\x00")
	langs := parseLanguages(&raw[0])
	if len(langs) != 2 || langs[0] != (language{"en-gb", 2}) || langs[1] != (language{"en", 3}) {
		t.Fatalf("parsed %+v", langs)
	}
	table := voiceTable([]voiceInfo{
		{Identifier: "gmw/en", Languages: []language{{"en-gb", 2}, {"en", 2}}},
		{Identifier: "gmw/en-US", Languages: []language{{"en-us", 2}, {"en", 3}}},
		{Identifier: "sit/cmn", Languages: []language{{"cmn", 5}, {"zh", 5}}},
		{Identifier: "sit/yue", Languages: []language{{"yue", 5}, {"zh", 4}}},
		{Identifier: "mb/mb-en1", Languages: []language{{"en", 1}}},
	})
	want := map[string]string{"en": "gmw/en", "en-gb": "gmw/en", "en-us": "gmw/en-US", "cmn": "sit/cmn", "yue": "sit/yue", "zh": "sit/yue"}
	if len(table) != len(want) {
		t.Fatalf("table %v, want %v", table, want)
	}
	for k, v := range want {
		if table[k] != v {
			t.Errorf("%s → %q, want %q", k, table[k], v)
		}
	}
}
