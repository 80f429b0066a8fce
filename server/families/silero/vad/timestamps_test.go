package vad

import (
	"errors"
	"math"
	"reflect"
	"testing"
)

// probsOf expands runs of (probability, chunks) into a probability list.
func probsOf(runs ...float32) []float32 {
	var p []float32
	for i := 0; i+1 < len(runs); i += 2 {
		for j := 0; j < int(runs[i+1]); j++ {
			p = append(p, runs[i])
		}
	}
	return p
}

func TestSpeechTimestamps(t *testing.T) {
	o := DefaultOptions()
	const W = ChunkSize
	cases := []struct {
		name  string
		probs []float32
		opts  func(*Options)
		want  []Span
	}{
		{"silence", probsOf(0.1, 20), nil, nil},
		// 10 chunks of speech from chunk 5: padded by 480 samples each side.
		{"one segment", probsOf(0.1, 5, 0.9, 10, 0.1, 10), nil, []Span{{5*W - 480, 15*W + 480}}},
		// Too short (3 chunks = 1536 samples < 4000): dropped.
		{"too short", probsOf(0.1, 5, 0.9, 3, 0.1, 10), nil, nil},
		// A dip to 0.4 is above neg_threshold 0.35: speech continues.
		{"hysteresis", probsOf(0.9, 10, 0.4, 10, 0.9, 10, 0.0, 10), nil, []Span{{0, 30*W + 480}}},
		// A 2-chunk gap (1024 samples) is shorter than min silence (1600).
		{"short gap", probsOf(0.9, 10, 0.0, 2, 0.9, 10, 0.0, 10), nil, []Span{{0, 22*W + 480}}},
		// Two segments 5 chunks apart: each padded by 480.
		{"two segments", probsOf(0.9, 10, 0.0, 5, 0.9, 10, 0.0, 10), nil, []Span{{0, 10*W + 480}, {15*W - 480, 25*W + 480}}},
		// Gap shorter than twice the padding: split in the middle.
		{"close segments", probsOf(0.9, 10, 0.0, 5, 0.9, 10, 0.0, 10), func(o *Options) { o.SpeechPadMs = 100 }, []Span{{0, 10*W + 1280}, {15*W - 1280, 25*W + 1600}}},
		// Speech to the end: the segment ends at the signal's end.
		{"to the end", probsOf(0.0, 2, 0.9, 20), nil, []Span{{2*W - 480, 22*W - 100}}},
		// Max speech 1 s with no silence: hard cut at the chunk that exceeds it.
		{"max speech hard cut", probsOf(0.9, 80), func(o *Options) { o.MaxSpeechDurationS = 1; o.SpeechPadMs = 0 }, []Span{{0, 31 * W}, {32 * W, 63 * W}, {64 * W, 80*W - 100}}},
		// Threshold option: nothing reaches 0.95.
		{"threshold", probsOf(0.9, 20), func(o *Options) { o.Threshold = 0.95 }, nil},
	}
	for _, c := range cases {
		oo := o
		if c.opts != nil {
			c.opts(&oo)
		}
		n := len(c.probs) * W
		if c.name == "to the end" || c.name == "max speech hard cut" {
			n -= 100
		}
		got := SpeechTimestamps(c.probs, n, oo)
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
	}
}

func TestToInputRate(t *testing.T) {
	probs := []float32{0.2, 0.4, 0.6, 0.8}
	segs := ToInputRate([]Span{{512, 1100}}, probs, 44100, 5000)
	// 512*44100/16000 = 1411.2 -> 1411; 1100 -> 3031.9 -> 3032; chunks 1..2.
	want := Segment{StartSample: 1411, EndSample: 3032, Confidence: (0.4 + float64(float32(0.6))) / 2}
	if len(segs) != 1 || segs[0].StartSample != want.StartSample || segs[0].EndSample != want.EndSample || math.Abs(segs[0].Confidence-0.5) > 1e-7 {
		t.Errorf("got %+v, want %+v", segs, want)
	}
	if s := ToInputRate([]Span{{0, 2048}}, probs, 44100, 5000); s[0].EndSample != 5000 {
		t.Errorf("end not clamped to the input length: %+v", s)
	}
}

func TestParseOptions(t *testing.T) {
	o, err := ParseOptions(
		map[string]string{"threshold": "0.7", "speech_pad_ms": "10"},
		map[string]string{"threshold": " 0.6 ", "max_speech_duration_s": "inf", "use_max_poss_sil_at_max_speech": "false", "unrelated": "x"},
	)
	if err != nil {
		t.Fatal(err)
	}
	if o.Threshold != 0.6 || o.SpeechPadMs != 10 || !math.IsInf(o.MaxSpeechDurationS, 1) || o.UseMaxPossSilAtMaxSpeech {
		t.Errorf("layering: %+v", o)
	}
	if d := DefaultOptions(); d.Threshold != 0.5 || d.MinSpeechDurationMs != 250 || d.MinSilenceDurationMs != 100 || d.SpeechPadMs != 30 ||
		!math.IsInf(d.MaxSpeechDurationS, 1) || d.MinSilenceAtMaxSpeechMs != 98 || !d.UseMaxPossSilAtMaxSpeech || !math.IsNaN(d.NegThreshold) {
		t.Errorf("defaults: %+v", d)
	}
	for _, bad := range []map[string]string{
		{"threshold": "x"}, {"threshold": "-0.1"}, {"threshold": "NaN"}, {"neg_threshold": "2"},
		{"min_speech_duration_ms": "-5"}, {"min_silence_duration_ms": "inf"}, {"speech_pad_ms": ""},
		{"max_speech_duration_s": "0"}, {"max_speech_duration_s": "-inf"}, {"min_silence_at_max_speech_ms": "y"},
		{"use_max_poss_sil_at_max_speech": "yes please"},
	} {
		_, err := ParseOptions(bad)
		var oe *OptionError
		if !errors.As(err, &oe) {
			t.Errorf("%v: got %v, want an OptionError", bad, err)
			continue
		}
		for k := range bad {
			if oe.Name != k {
				t.Errorf("%v: error names %q", bad, oe.Name)
			}
		}
	}
}
