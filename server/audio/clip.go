// Package audio holds audio as the server passes it around (Clip), the WAV
// reader and writer, channel mixing and resampling.
package audio

import "time"

// Clip is PCM audio as float32 samples in [-1, 1], interleaved by channel.
type Clip struct {
	SampleRate int
	Channels   int
	Samples    []float32 // len = frames * Channels
}

// Frames is the number of sample frames (samples per channel).
func (c *Clip) Frames() int {
	if c == nil || c.Channels <= 0 {
		return 0
	}
	return len(c.Samples) / c.Channels
}

// Duration is the length of the clip in time.
func (c *Clip) Duration() time.Duration {
	if c == nil || c.SampleRate <= 0 {
		return 0
	}
	return time.Duration(c.Frames()) * time.Second / time.Duration(c.SampleRate)
}
