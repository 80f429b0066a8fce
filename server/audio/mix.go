package audio

// Mono returns a new one-channel clip whose samples are the average of c's
// channels, frame by frame. A mono clip is copied unchanged. Mono(nil) is nil.
func Mono(c *Clip) *Clip {
	if c == nil {
		return nil
	}
	frames := c.Frames()
	out := &Clip{SampleRate: c.SampleRate, Channels: 1, Samples: make([]float32, frames)}
	if c.Channels == 1 {
		copy(out.Samples, c.Samples[:frames])
		return out
	}
	ch := c.Channels
	inv := 1 / float64(ch)
	for f := range frames {
		var sum float64
		for _, s := range c.Samples[f*ch : f*ch+ch] {
			sum += float64(s)
		}
		out.Samples[f] = float32(sum * inv)
	}
	return out
}
