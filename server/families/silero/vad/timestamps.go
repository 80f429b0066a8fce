package vad

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Options are the post-processing settings of silero's get_speech_timestamps,
// with its defaults (DefaultOptions).
type Options struct {
	Threshold                float64 // probability at or above which a chunk is speech
	NegThreshold             float64 // probability below which speech ends
	MinSpeechDurationMs      float64 // shorter segments are dropped
	MinSilenceDurationMs     float64 // silence needed to end a segment
	SpeechPadMs              float64 // padding added on each side
	MaxSpeechDurationS       float64 // longer segments are split (+Inf: never)
	MinSilenceAtMaxSpeechMs  float64 // silence long enough to split at when a segment is too long
	UseMaxPossSilAtMaxSpeech bool    // split at the longest such silence (else the last one)
}

// DefaultOptions are get_speech_timestamps' defaults. NegThreshold is NaN,
// meaning max(Threshold-0.15, 0.01).
func DefaultOptions() Options {
	return Options{
		Threshold: 0.5, NegThreshold: math.NaN(), MinSpeechDurationMs: 250, MinSilenceDurationMs: 100,
		SpeechPadMs: 30, MaxSpeechDurationS: math.Inf(1), MinSilenceAtMaxSpeechMs: 98,
		UseMaxPossSilAtMaxSpeech: true,
	}
}

// OptionNames are the option keys ParseOptions reads.
var OptionNames = []string{
	"threshold", "neg_threshold", "min_speech_duration_ms", "min_silence_duration_ms", "speech_pad_ms",
	"max_speech_duration_s", "min_silence_at_max_speech_ms", "use_max_poss_sil_at_max_speech",
}

// OptionError is a bad option value; its message names the option.
type OptionError struct {
	Name, Value, Want string
}

func (e *OptionError) Error() string {
	return fmt.Sprintf("option %s=%q is invalid: want %s", e.Name, e.Value, e.Want)
}

// ParseOptions reads options from layers of string maps; later layers win
// (pass session options first, request options last). Unknown keys are
// ignored: they may belong to other parts of the request.
func ParseOptions(layers ...map[string]string) (Options, error) {
	o := DefaultOptions()
	get := func(name string) (string, bool) {
		var v string
		found := false
		for _, l := range layers {
			if s, ok := l[name]; ok {
				v, found = strings.TrimSpace(s), true
			}
		}
		return v, found
	}
	num := func(name string, dst *float64, lo, hi float64, allowInf bool, want string) error {
		s, ok := get(name)
		if !ok {
			return nil
		}
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || math.IsNaN(f) || (math.IsInf(f, 0) && !(allowInf && f > 0)) || f < lo || (!math.IsInf(f, 0) && f > hi) {
			return &OptionError{Name: name, Value: s, Want: want}
		}
		*dst = f
		return nil
	}
	const big = 1e9
	for _, step := range []error{
		num("threshold", &o.Threshold, 0, 1, false, "a number from 0 to 1"),
		num("neg_threshold", &o.NegThreshold, 0, 1, false, "a number from 0 to 1"),
		num("min_speech_duration_ms", &o.MinSpeechDurationMs, 0, big, false, "a number of milliseconds >= 0"),
		num("min_silence_duration_ms", &o.MinSilenceDurationMs, 0, big, false, "a number of milliseconds >= 0"),
		num("speech_pad_ms", &o.SpeechPadMs, 0, big, false, "a number of milliseconds >= 0"),
		num("max_speech_duration_s", &o.MaxSpeechDurationS, 0, big, true, "a number of seconds > 0, or inf"),
		num("min_silence_at_max_speech_ms", &o.MinSilenceAtMaxSpeechMs, 0, big, false, "a number of milliseconds >= 0"),
	} {
		if step != nil {
			return o, step
		}
	}
	if s, ok := get("max_speech_duration_s"); ok && o.MaxSpeechDurationS <= 0 {
		return o, &OptionError{Name: "max_speech_duration_s", Value: s, Want: "a number of seconds > 0, or inf"}
	}
	if s, ok := get("use_max_poss_sil_at_max_speech"); ok {
		b, err := strconv.ParseBool(s)
		if err != nil {
			return o, &OptionError{Name: "use_max_poss_sil_at_max_speech", Value: s, Want: "true or false"}
		}
		o.UseMaxPossSilAtMaxSpeech = b
	}
	return o, nil
}

// Span is a speech segment in 16 kHz samples, end exclusive.
type Span struct {
	Start, End int64
}

// SpeechTimestamps turns per-chunk probabilities of a signal of length
// samples (16 kHz) into speech segments, following silero's
// get_speech_timestamps step by step (same thresholds with hysteresis,
// minimum durations, max-speech splitting and padding).
func SpeechTimestamps(probs []float32, length int, o Options) []Span {
	neg := o.NegThreshold
	if math.IsNaN(neg) {
		neg = math.Max(o.Threshold-0.15, 0.01)
	}
	const w = ChunkSize
	rate := float64(SampleRate)
	minSpeech := rate * o.MinSpeechDurationMs / 1000
	pad := rate * o.SpeechPadMs / 1000
	maxSpeech := rate*o.MaxSpeechDurationS - w - 2*pad
	minSilence := rate * o.MinSilenceDurationMs / 1000
	minSilenceAtMax := rate * o.MinSilenceAtMaxSpeechMs / 1000

	type end struct{ at, dur int64 }
	var (
		speeches                    []Span
		cur                         *Span
		triggered                   bool
		tempEnd, prevEnd, nextStart int64
		possible                    []end
	)
	for i, p32 := range probs {
		p := float64(p32)
		pos := int64(w * i)
		if p >= o.Threshold && tempEnd != 0 {
			if sil := pos - tempEnd; float64(sil) > minSilenceAtMax {
				possible = append(possible, end{tempEnd, sil})
			}
			tempEnd = 0
			if nextStart < prevEnd {
				nextStart = pos
			}
		}
		if p >= o.Threshold && !triggered {
			triggered = true
			cur = &Span{Start: pos}
			continue
		}
		if triggered && float64(pos-cur.Start) > maxSpeech {
			if len(possible) > 0 {
				pick := possible[len(possible)-1]
				if o.UseMaxPossSilAtMaxSpeech {
					pick = possible[0]
					for _, e := range possible {
						if e.dur > pick.dur {
							pick = e
						}
					}
				}
				prevEnd = pick.at
				cur.End = prevEnd
				speeches = append(speeches, *cur)
				cur = nil
				nextStart = prevEnd + pick.dur
				if nextStart < prevEnd+pos {
					cur = &Span{Start: nextStart}
				} else {
					triggered = false
				}
				kept := possible[:0]
				for _, e := range possible {
					if e.at > nextStart {
						kept = append(kept, e)
					}
				}
				possible = kept
				prevEnd, nextStart, tempEnd = 0, 0, 0
			} else {
				cur.End = pos
				speeches = append(speeches, *cur)
				cur = nil
				prevEnd, nextStart, tempEnd = 0, 0, 0
				triggered = false
				possible = nil
				continue
			}
		}
		if p < neg && triggered {
			if tempEnd == 0 {
				tempEnd = pos
			}
			if float64(pos-tempEnd) < minSilence {
				continue
			}
			cur.End = tempEnd
			if float64(cur.End-cur.Start) > minSpeech {
				speeches = append(speeches, *cur)
			}
			cur = nil
			prevEnd, nextStart, tempEnd = 0, 0, 0
			triggered = false
			possible = nil
			continue
		}
	}
	n := int64(length)
	if cur != nil && float64(n-cur.Start) > minSpeech {
		cur.End = n
		speeches = append(speeches, *cur)
	}
	for i := range speeches {
		s := &speeches[i]
		if i == 0 {
			s.Start = int64(math.Max(0, float64(s.Start)-pad))
		}
		if i != len(speeches)-1 {
			next := &speeches[i+1]
			sil := next.Start - s.End
			if float64(sil) < 2*pad {
				s.End += floorDiv(sil, 2)
				next.Start = max(0, next.Start-floorDiv(sil, 2))
			} else {
				s.End = int64(math.Min(float64(n), float64(s.End)+pad))
				next.Start = int64(math.Max(0, float64(next.Start)-pad))
			}
		} else {
			s.End = int64(math.Min(float64(n), float64(s.End)+pad))
		}
	}
	return speeches
}

// floorDiv is Python's a // b for b > 0.
func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && (a < 0) {
		q--
	}
	return q
}

// Segment is a speech segment at the input's sample rate.
type Segment struct {
	StartSample, EndSample int64
	Confidence             float64
}

// ToInputRate maps 16 kHz spans to the input rate (rounded to the nearest
// sample, clamped to inFrames) and attaches each segment's confidence: the
// mean probability of the chunks it overlaps.
func ToInputRate(spans []Span, probs []float32, inRate int, inFrames int64) []Segment {
	conv := func(x int64) int64 {
		return min(inFrames, (x*int64(inRate)+SampleRate/2)/SampleRate)
	}
	out := make([]Segment, 0, len(spans))
	for _, s := range spans {
		a := s.Start / ChunkSize
		b := min(int64(len(probs)), (s.End+ChunkSize-1)/ChunkSize)
		var sum float64
		for i := a; i < b; i++ {
			sum += float64(probs[i])
		}
		conf := 0.0
		if b > a {
			conf = sum / float64(b-a)
		}
		out = append(out, Segment{StartSample: conv(s.Start), EndSample: conv(s.End), Confidence: conf})
	}
	return out
}
