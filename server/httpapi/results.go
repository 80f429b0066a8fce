package httpapi

import (
	"encoding/base64"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/audioproof/audioproof/server/audio"
	"github.com/audioproof/audioproof/server/session"
)

// ms rounds a duration to milliseconds with three decimals.
func ms(d time.Duration) float64 {
	return math.Round(float64(d)/float64(time.Microsecond)) / 1000
}

// timing is the top-level `timing` object: wall time, and with audio its
// duration and real-time factor.
func timing(wall time.Duration, audioDur time.Duration, withAudio bool) orderedObject {
	t := orderedObject{{"wall_ms", ms(wall)}}
	if withAudio {
		t = append(t, field{"audio_duration_ms", ms(audioDur)})
		rtf := 0.0
		if audioDur > 0 {
			rtf = math.Round(float64(wall)/float64(audioDur)*1e6) / 1e6
		}
		t = append(t, field{"rtf", rtf})
	}
	return t
}

// setTimingHeaders sets the X-AudioCPP-* timing headers.
func (x *exchange) setTimingHeaders(wall, audioDur time.Duration) {
	x.setHeader("X-AudioCPP-Wall-Ms", fmt.Sprint(ms(wall)))
	x.setHeader("X-AudioCPP-Audio-Duration-Ms", fmt.Sprint(ms(audioDur)))
	rtf := 0.0
	if audioDur > 0 {
		rtf = float64(wall) / float64(audioDur)
	}
	x.setHeader("X-AudioCPP-RTF", fmt.Sprintf("%.6f", rtf))
}

func wavBase64(c *audio.Clip) string {
	return base64.StdEncoding.EncodeToString(audio.EncodeWAV(c))
}

// structured appends the structured outputs that are present.
func structured(o orderedObject, res *session.Result, withRate bool) orderedObject {
	any := false
	if res.Segments != nil {
		o = append(o, field{"segments", res.Segments})
		any = true
	}
	if res.SpeakerTurns != nil {
		o = append(o, field{"speaker_turns", res.SpeakerTurns})
		any = true
	}
	if res.Words != nil {
		o = append(o, field{"words", res.Words})
		any = true
	}
	if any && withRate && res.SampleRate > 0 {
		o = append(o, field{"sample_rate", res.SampleRate})
	}
	return o
}

// extra appends family-specific fields in sorted key order.
func extra(o orderedObject, res *session.Result) orderedObject {
	keys := make([]string, 0, len(res.Extra))
	for k := range res.Extra {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		o = append(o, field{k, res.Extra[k]})
	}
	return o
}

// runResult is the /v1/tasks/run reply shape without timing.
func runResult(res *session.Result) orderedObject {
	var o orderedObject
	if res.Text != "" {
		o = append(o, field{"text", res.Text})
	}
	if res.Language != "" {
		o = append(o, field{"language", res.Language})
	}
	if res.Audio != nil {
		o = append(o, field{"audio", wavBase64(res.Audio)}, field{"sample_rate", res.Audio.SampleRate}, field{"channels", res.Audio.Channels})
	}
	o = structured(o, res, res.Audio == nil)
	return extra(o, res)
}
